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
from datetime import datetime
from typing import TYPE_CHECKING

from aipaas.api.job import Job, JobPhase, TaskPhase
from aipaas.api.queue import Queue
from aipaas.api.tenancy import Tenant
from aipaas.controller.launch import log_path, request_id
from aipaas.controller.placement import Placer, Slot
from aipaas.controller.work import JobWork, fair_order, job_usage
from aipaas.store import TaskRecord
from aipaas.tenancy.quota import Usage, exceeded

if TYPE_CHECKING:  # the controller calls this module; only its type is needed here
    from aipaas.controller.cycle import Controller

log = logging.getLogger("aipaas.controller")


def place(ctl: Controller, work: list[JobWork]) -> Placer:
    """Hold what placed tasks use, admit and place pending jobs, start what was placed."""
    placer = Placer(ctl.nodes, ctl.policy, ctl.claims.devices(work))
    tenant_use: dict[str, Usage] = defaultdict(Usage)
    queue_use: dict[tuple[str, str], Usage] = defaultdict(Usage)
    for item in work:
        for record in item.records:
            if record.node is None or TaskPhase(record.phase).finished:
                continue
            pod = ctl.claims.pod(item.job, record)
            problem = placer.hold(pod, record.node, record.gpus, record.gpu_milli)
            if problem is not None:
                log.warning("cannot hold %s of job %s: %s", record.name, item.job.name, problem)
                item.set(record.with_(phase=TaskPhase.LOST.value, message=problem))
                continue
            usage = Usage.of(pod.amounts)
            tenant_use[item.job.tenant] += usage
            queue_use[(item.job.tenant, item.job.spec.queue)] += usage
    pending = [i for i in work if not i.records and i.phase is None]
    tenants = {t.name: t for t in ctl.store.list_objects("Tenant", "") if isinstance(t, Tenant)}
    queues = {
        (q.tenant, q.name): q for q in ctl.store.list_objects("Queue", None) if isinstance(q, Queue)
    }
    admitted: list[JobWork] = []
    for item in fair_order(pending, queues, queue_use, placer.capacity()):
        if _admit(ctl, item, placer, tenants, queues, tenant_use, queue_use):
            admitted.append(item)
    # The records of every admitted job are durable (one transaction) before the backend
    # is asked to start anything: a crash in between is repaired by asking again.
    with ctl.store.transaction() as tx:
        ctl.tasks.insert_many([r for item in admitted for r in item.records], conn=tx)
    for item in admitted:
        for record in list(item.records):
            if record.phase == TaskPhase.STARTING.value:
                ctl.start_task(item, record)
    for item in work:
        if item.phase is None:
            _place_stragglers(ctl, item, placer)
    return placer


def _place_stragglers(ctl: Controller, item: JobWork, placer: Placer) -> None:
    """Replicas beyond minAvailable start one by one as room appears."""
    for record in list(item.records):
        if record.node is not None or record.phase != TaskPhase.PENDING.value:
            continue
        result = placer.place([ctl.claims.pod(item.job, record)])
        if isinstance(result, tuple):
            return
        slot = result[0]
        ctl.claims.record_allocated(item.job, record.name, slot.allocations)
        placed = _starting_on(record, slot)
        item.set(placed)
        ctl.save_records(item)
        ctl.start_task(item, placed)


def _admit(
    ctl: Controller,
    item: JobWork,
    placer: Placer,
    tenants: dict[str, Tenant],
    queues: dict[tuple[str, str], Queue],
    tenant_use: dict[str, Usage],
    queue_use: dict[tuple[str, str], Usage],
) -> bool:
    """Admit and place one pending job's gang; False with the reason on ``item`` if it waits."""
    job = item.job
    if job.spec.depends_on and not _dependencies_met(ctl, item):
        return False
    wanted = job_usage(job)
    tenant = tenants.get(job.tenant)
    queue = queues.get((job.tenant, job.spec.queue))
    if tenant is None or queue is None:
        missing = f"tenant {job.tenant}" if tenant is None else f"queue {job.spec.queue}"
        item.reason, item.message = "Waiting", f"{missing} does not exist"
        return False
    why = exceeded(tenant.spec.quota, tenant_use[job.tenant], wanted)
    if why is not None:
        item.reason, item.message = "QuotaExceeded", f"tenant {job.tenant} quota: {why}"
        return False
    key = (job.tenant, job.spec.queue)
    why = exceeded(queue.spec.quota, queue_use[key], wanted)
    if why is not None:
        item.reason, item.message = "QuotaExceeded", f"queue {job.spec.queue} quota: {why}"
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
    tenant_use[job.tenant] += wanted
    queue_use[key] += wanted
    created = job.metadata.creation_timestamp
    if created:
        latency = ctl.clock.now() - datetime.fromisoformat(created.replace("Z", "+00:00"))
        ctl.metrics.scheduling_latency.observe(max(latency.total_seconds(), 0.0))
    nodes = sorted({slot.node for slot in result})
    item.reason, item.message = "Scheduled", f"{len(result)} tasks placed on {', '.join(nodes)}"
    item.event("Scheduled", item.message)
    item.changed.clear()
    return True


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
