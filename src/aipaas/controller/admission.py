"""Step 4 of a controller cycle: admit and place.

The placements of every task that holds resources are taken back first (so a restarted
controller sees the same allocations); pending jobs then go in fair order through their
dependencies, the tenant's and the queue's quotas and their claims, and the scheduler places
their gang. The records of admitted jobs are committed before the backend is asked to start
anything. Replicas beyond minAvailable start one by one as room appears.

Who calls it: ``Controller.run_cycle`` (controller/cycle.py), passing itself for the store, the
claims, the clock and the task actions (``finish``, ``start_task``, ``save_records``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from aipaas.api.job import Job, JobPhase, TaskPhase
from aipaas.api.queue import Queue
from aipaas.api.tenancy import Tenant
from aipaas.controller.launch import log_path, request_id
from aipaas.controller.placement import Placer, Pod, Slot
from aipaas.controller.work import ACTIVE, JobWork, fair_order
from aipaas.store import TaskRecord
from aipaas.tenancy.quota import Usage, exceeded

if TYPE_CHECKING:  # the controller calls this module; only its type is needed here
    from aipaas.controller.cycle import Controller

log = logging.getLogger("aipaas.controller")


def place(ctl: Controller, work: list[JobWork]) -> Placer:
    """Hold what placed tasks use, admit and place pending jobs, start what was placed."""
    placer = Placer(ctl.inventory.ready, ctl.policy, ctl.claims.devices(work))
    tenant_use: dict[str, Usage] = defaultdict(Usage)
    queue_use: dict[tuple[str, str], Usage] = defaultdict(Usage)
    for item in work:
        for record in item.records:
            if record.node is None or (TaskPhase(record.phase).finished and not record.stopping):
                continue
            pod = ctl.claims.pod(item.job, record)
            # Whatever becomes of the hold, the task counts against its quotas while it may
            # run: on a node whose state is unknown, or while its stop is not yet confirmed.
            usage = _usage(pod, record.gpus)
            tenant_use[item.job.tenant] += usage
            queue_use[(item.job.tenant, item.job.spec.queue)] += usage
            problem = placer.hold(pod, record.node, record.gpus, record.gpu_milli)
            if problem is None or record.stopping:
                continue
            if not ctl.inventory.is_ready(record.node) and not ctl.inventory.is_gone(record.node):
                continue  # its node's state is unknown: neither held anew nor given up
            log.warning("cannot hold %s of job %s: %s", record.name, item.job.name, problem)
            if record.phase in ACTIVE:
                # It may run where another task now is (a write-back lost in a crash): stopped,
                # and replaced only once its stop is confirmed.
                ctl.give_up(item, record, TaskPhase.LOST, problem)
                item.event("TaskLost", f"{record.name}: {problem}", True)
            else:
                # A restart waiting for resources it no longer has: placed again, like a
                # replica beyond minAvailable (within the quotas), not started where it was.
                item.set(record.with_(node=None, node_index=None, gpus=(), gpu_milli=0))
    pending = [i for i in work if not i.records and i.phase is None and not i.ending]
    tenants = {t.name: t for t in ctl.store.list_objects("Tenant", "") if isinstance(t, Tenant)}
    queues = {
        (q.tenant, q.name): q for q in ctl.store.list_objects("Queue", None) if isinstance(q, Queue)
    }
    quotas = _Quotas(tenants, queues, tenant_use, queue_use)
    admitted: list[JobWork] = []
    weights = {name: tenant.spec.weight for name, tenant in tenants.items()}
    for item in fair_order(pending, queues, queue_use, placer.capacity(), tenant_use, weights):
        if _admit(ctl, item, placer, quotas):
            admitted.append(item)
    # The records of every admitted job are durable (one transaction, fenced: refused if this
    # controller lost its lease) before the backend is asked to start anything: a crash in
    # between is repaired by asking again.
    if admitted:
        with ctl.fenced() as tx:
            ctl.tasks.insert_many([r for item in admitted for r in item.records], conn=tx)
    for item in admitted:
        for record in list(item.records):
            if record.phase == TaskPhase.STARTING.value:
                ctl.start_task(item, record)
    for item in work:
        if item.phase is None and not item.ending:
            _place_stragglers(ctl, item, placer, quotas)
    return placer


@dataclass
class _Quotas:
    """Tenants and queues, and what each uses in this cycle (added to as tasks are placed)."""

    tenants: dict[str, Tenant]
    queues: dict[tuple[str, str], Queue]
    tenant_use: dict[str, Usage]
    queue_use: dict[tuple[str, str], Usage]

    def why_not(self, job: Job, wanted: Usage) -> tuple[str, str] | None:
        """(reason, message) when ``wanted`` more of ``job`` breaks a quota; None if it fits."""
        tenant = self.tenants.get(job.tenant)
        queue = self.queues.get((job.tenant, job.spec.queue))
        if tenant is None or queue is None:
            missing = f"tenant {job.tenant}" if tenant is None else f"queue {job.spec.queue}"
            return "Waiting", f"{missing} does not exist"
        why = exceeded(tenant.spec.quota, self.tenant_use[job.tenant], wanted)
        if why is not None:
            return "QuotaExceeded", f"tenant {job.tenant} quota: {why}"
        why = exceeded(queue.spec.quota, self.queue_use[(job.tenant, job.spec.queue)], wanted)
        if why is not None:
            return "QuotaExceeded", f"queue {job.spec.queue} quota: {why}"
        return None

    def take(self, job: Job, used: Usage) -> None:
        self.tenant_use[job.tenant] += used
        self.queue_use[(job.tenant, job.spec.queue)] += used


def _place_stragglers(ctl: Controller, item: JobWork, placer: Placer, quotas: _Quotas) -> None:
    """Replicas beyond minAvailable start one by one as room appears, within the tenant's
    and the queue's quotas like every other replica."""
    now = ctl.clock.now()
    for record in list(item.records):
        if record.node is not None or record.phase != TaskPhase.PENDING.value:
            continue
        if record.stopping or (record.restart_after is not None and record.restart_after > now):
            continue  # a restart placed again: its attempt before has stopped, its backoff passed
        pod = ctl.claims.pod(item.job, record)
        usage = Usage.of(pod.amounts)
        if quotas.why_not(item.job, usage) is not None:
            return
        result = placer.place([pod])
        if isinstance(result, tuple):
            return
        usage = _usage(pod, result[0].gpus)
        if quotas.why_not(item.job, usage) is not None:  # its claims gave it GPUs beyond quota
            placer.release(result)
            return
        quotas.take(item.job, usage)
        slot = result[0]
        ctl.claims.record_allocated(item.job, record.name, slot.allocations)
        if record.request_id is not None:  # it ran before: a new attempt, a new request id
            record = record.with_(attempt=record.attempt + 1, restart_after=None, exit_code=None)
        placed = _starting_on(record, slot)
        item.set(placed)
        ctl.save_records(item)  # fenced: checks the lease before this start
        ctl.start_task(item, placed)


def _admit(ctl: Controller, item: JobWork, placer: Placer, quotas: _Quotas) -> bool:
    """Admit and place one pending job's gang; False with the reason on ``item`` if it waits.
    The gang (minAvailable replicas) must fit the quotas; the others are placed later, each
    within the quotas (``_place_stragglers``)."""
    job = item.job
    if job.spec.depends_on and not _dependencies_met(ctl, item):
        return False
    wanted = _gang_usage(job)
    refused = quotas.why_not(job, wanted)  # first: cheap, and what most waiting jobs wait for
    if refused is not None:
        item.reason, item.message = refused
        return False
    records = _new_records(ctl, job)
    gang = records[: job.spec.gang_size]
    problem = ctl.claims.problem(job)
    if problem is not None:
        item.reason, item.message = "Unschedulable", problem
        return False
    pods = [ctl.claims.pod(job, r) for r in gang]
    result = placer.place(pods)
    if isinstance(result, tuple):
        hint = [
            f"claim {c.metadata.name} is what resources.gpu of task {r.group_name} compiles to"
            for p, r in zip(pods, gang, strict=True)
            if p.gpu_claim
            for c in p.claims[-1:]
        ][:1]
        item.reason, item.message = "Unschedulable", "; ".join((*result, *hint))
        ctl.claims.record_wait(job, item.message)
        return False
    claimed = Usage()
    for pod, given in zip(pods, result, strict=True):
        claimed += _usage(pod, given.gpus)
    if claimed != wanted:  # GPUs that explicit claims were given count too
        refused = quotas.why_not(job, claimed)
        if refused is not None:
            placer.release(result)
            item.reason, item.message = refused
            return False
        wanted = claimed
    for where in result:
        ctl.claims.record_allocated(job, where.name.rsplit("/", 1)[-1], where.allocations)
    placed = dict(zip((r.name for r in gang), result, strict=True))
    for index, record in enumerate(records):
        slot = placed.get(record.name)
        if slot is None:
            continue
        records[index] = _starting_on(record, slot)
    item.records = records
    item.changed = {r.name for r in records}
    quotas.take(job, wanted)
    created = job.metadata.creation_timestamp
    if created:
        latency = ctl.clock.now() - datetime.fromisoformat(created.replace("Z", "+00:00"))
        ctl.metrics.scheduling_latency.observe(max(latency.total_seconds(), 0.0))
    nodes = sorted({slot.node for slot in result})
    item.reason, item.message = "Scheduled", f"{len(result)} tasks placed on {', '.join(nodes)}"
    item.event("Scheduled", item.message)
    item.changed.clear()
    return True


def _usage(pod: Pod, gpus: tuple[int, ...]) -> Usage:
    """What one task counts against quotas: its resources, and the whole GPUs that its
    explicit DRA claims were given (``gpus`` of its slot or record; the ``gpu:`` short form is
    already in its resources)."""
    usage = Usage.of(pod.amounts)
    if pod.claims and not pod.gpu_claim and gpus:
        usage += Usage(gpu_milli=1000 * len(gpus))
    return usage


def _gang_usage(job: Job) -> Usage:
    """What the first ``minAvailable`` replicas (in task order) use: the gang admitted now."""
    total, left = Usage(), job.spec.gang_size
    for task in job.spec.tasks:
        count = min(task.replicas, left)
        if count:
            total += Usage.of(task.resources.amounts().scaled(count))
        left -= count
    return total


def _starting_on(record: TaskRecord, slot: Slot) -> TaskRecord:
    """The record of a task placed in ``slot``, to be started under its request id."""
    placed = record.with_(
        node=slot.node,
        node_index=slot.node_index,
        gpus=slot.gpus,
        gpu_milli=slot.gpu_milli,
        phase=TaskPhase.STARTING.value,
    )
    return placed.with_(request_id=request_id(placed))


def _dependencies_met(ctl: Controller, item: JobWork) -> bool:
    """All of ``dependsOn`` succeeded; a failed or cancelled one fails this job."""
    for name in item.job.spec.depends_on:
        other = ctl.store.find("Job", item.job.tenant, name)
        if not isinstance(other, Job):
            item.reason, item.message = "WaitingForDependencies", f"job {name} does not exist"
            return False
        phase = other.status.phase if other.status else JobPhase.PENDING
        if phase in (JobPhase.FAILED, JobPhase.CANCELLED):
            ctl.finish(
                item, JobPhase.FAILED, "DependencyFailed", f"job {name} {phase.value.lower()}"
            )
            return False
        if phase is not JobPhase.SUCCEEDED:
            item.reason = "WaitingForDependencies"
            item.message = f"waiting for job {name} ({phase.value})"
            return False
    return True


def _new_records(ctl: Controller, job: Job) -> list[TaskRecord]:
    """One record per replica, ranked in task order; not placed yet."""
    records = []
    rank = 0
    for task in job.spec.tasks:
        for index in range(task.replicas):
            name = f"{task.name}-{index}"
            records.append(
                TaskRecord(
                    job_uid=job.metadata.uid or "",
                    tenant=job.tenant,
                    job_name=job.name,
                    name=name,
                    group_name=task.name,
                    index=index,
                    rank=rank,
                    log_path=log_path(ctl.log_dir, job, name),
                )
            )
            rank += 1
    return records
