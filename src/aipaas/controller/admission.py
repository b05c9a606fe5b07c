"""Step 4 of a controller cycle: admit and place.

The placements of every task that holds resources are taken back first (so a restarted
controller sees the same allocations, and what runs counts against the quotas); jobs waiting
for their dependencies or for claims that do not exist are left out; the batch session then
decides, over all the others, what starts and what is evicted (controller/batch_cycle.py,
with the snapshot of controller/batch_snapshot.py). The records of started tasks are committed
before the backend is asked to start anything.

Who calls it: ``Controller.run_cycle`` (controller/cycle.py), passing itself for the store, the
claims, the clock and the task actions (``finish``, ``start_task``, ``give_up``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aipaas.api.job import Job, JobPhase, TaskPhase
from aipaas.api.queue import Queue
from aipaas.api.tenancy import Tenant, User
from aipaas.controller import batch_cycle
from aipaas.controller.data_placement import data_view_for
from aipaas.controller.launch import log_path, request_id
from aipaas.controller.placement import Placer, Slot
from aipaas.controller.work import ACTIVE, FINISHED_TASK, JobWork
from aipaas.scheduler.framework.types import Placement
from aipaas.store import TaskRecord

if TYPE_CHECKING:  # the controller calls this module; only its type is needed here
    from aipaas.controller.cycle import Controller

log = logging.getLogger("aipaas.controller")


def place(ctl: Controller, work: list[JobWork]) -> Placer:
    """Hold what placed tasks use, then let the batch session admit, place and evict
    (controller/batch_cycle.py); start what it placed."""
    placer = Placer(
        ctl.inventory.ready,
        ctl.policy,
        ctl.claims.devices(work),
        workload=ctl.workload.pods(),
        pool_policies=ctl.pool_profiles or None,
        data=data_view_for(ctl.store, (item.job for item in work if item.facts.datasets)),
    )
    held: dict[tuple[str, str], Placement] = {}
    for item in work:
        for record in item.records:
            if record.node is None or (record.phase in FINISHED_TASK and not record.stopping):
                continue
            pod = ctl.claims.pod(item.job, record)
            # Whatever becomes of the hold, the task counts against its quotas while it may
            # run (on a node whose state is unknown, or while its stop is not yet confirmed):
            # the snapshot keeps it in a pseudo job (batch_snapshot.py).
            placement = placer.hold_placement(
                pod,
                record.node,
                record.gpus,
                record.gpu_milli,
                ctl.claims.held_allocations(item.job, record) if pod.claims else None,
            )
            if isinstance(placement, Placement):
                if not record.stopping:
                    held[(item.job.metadata.uid or "", record.name)] = placement
                continue
            problem = placement
            if record.stopping:
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
    tenants = {t.name: t for t in ctl.store.list_objects("Tenant", "") if isinstance(t, Tenant)}
    queues = {
        (q.tenant, q.name): q for q in ctl.store.list_objects("Queue", None) if isinstance(q, Queue)
    }
    users = [u for u in ctl.store.list_objects("User", None) if isinstance(u, User)]
    admission = Admission(tenants, queues, users)
    eligible = []
    for item in work:
        if item.phase is not None or item.ending:
            continue
        if not item.records:
            if item.facts.depends and not _dependencies_met(ctl, item):
                continue  # jobs waiting for dependencies are not in the snapshot
            # only a job naming claims can miss one (ClaimBook.problem reads nothing else)
            missing = ctl.claims.problem(item.job) if item.facts.claims else None
            if missing is not None:  # claims that do not exist: nothing to place yet
                item.reason, item.message = "Unschedulable", missing
                continue
        if item.phase is None and not item.ending:
            eligible.append(item)
    batch_cycle.schedule(ctl, work, eligible, placer, admission, held)
    return placer


@dataclass
class Admission:
    """What the batch session admits against, read once per cycle: tenants and queues (their
    quotas and budgets' holds become the queue tree) and users with their quotas."""

    tenants: dict[str, Tenant]
    queues: dict[tuple[str, str], Queue]
    users: list[User] = field(default_factory=list)


def starting_on(record: TaskRecord, slot: Slot) -> TaskRecord:
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


def new_records(ctl: Controller, job: Job) -> list[TaskRecord]:
    """One record per replica, ranked in task order; not placed yet."""
    records = []
    rank = 0
    folder = str(Path(log_path(ctl.log_dir, job, "x")).parent)  # one path per job, not task
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
                    log_path=f"{folder}/{name}.log",
                )
            )
            rank += 1
    return records
