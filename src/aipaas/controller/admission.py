"""Step 4 of a controller cycle: admit and place, as a function of values returning a Plan.

The placements of every task that holds resources are taken back first (so a restarted
controller sees the same allocations, and what runs counts against the quotas); jobs waiting
for their dependencies or for claims that do not exist are left out; the batch session then
decides, over all the others, what starts and what is evicted (controller/batch_cycle.py,
with the snapshot of controller/batch_snapshot.py). What it decided comes back as a ``Plan``
(controller/plan.py), which the controller carries out: the records of started tasks are
committed before the backend is asked to start anything.

Who calls it: ``Controller.run_cycle`` (controller/cycle.py), with ``AdmitInputs``: what the
cycle read (the store for reading, the claims, the node inventory, the clock's now) and the
session's state kept between cycles (``BatchState``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from aipaas.api.job import Job, JobPhase, TaskPhase
from aipaas.api.queue import Queue
from aipaas.api.tenancy import Tenant, User
from aipaas.controller import batch_cycle
from aipaas.controller.batch_cycle import Admission, BatchState
from aipaas.controller.claims import ClaimBook
from aipaas.controller.data_placement import data_view_for
from aipaas.controller.lifecycle import Event, Facts, apply
from aipaas.controller.nodes import NodeInventory
from aipaas.controller.placement import Placer
from aipaas.controller.plan import Plan
from aipaas.controller.work import ACTIVE, FINISHED_TASK, JobWork
from aipaas.controller.workload import Workload
from aipaas.scheduler.framework.types import Placement
from aipaas.store import Store

log = logging.getLogger("aipaas.controller")


@dataclass(frozen=True)
class AdmitInputs:
    """What step 4 reads: the store (reading only), the cycle's claims and nodes, the
    scheduler profiles, the recent workload, the moment, and the session's kept state."""

    store: Store
    claims: ClaimBook
    inventory: NodeInventory
    policy: str
    pool_profiles: Mapping[str, str]
    workload: Workload
    now: datetime
    #: changes whenever the cycle listed other jobs or versions (work.py FactsCache)
    jobs_generation: int
    batch: BatchState


def place(inputs: AdmitInputs, work: list[JobWork]) -> tuple[Placer, Plan]:
    """Hold what placed tasks use, then let the batch session admit, place and evict
    (controller/batch_cycle.py); the placer as it left it, and the plan to carry out."""
    claims, inventory = inputs.claims, inputs.inventory
    plan = Plan()
    placer = Placer(
        inventory.ready,
        inputs.policy,
        claims.devices(work, inventory.held_elsewhere),
        workload=inputs.workload.pods(),
        pool_policies=inputs.pool_profiles or None,
        data=data_view_for(inputs.store, (item.job for item in work if item.facts.datasets)),
    )
    held: dict[tuple[str, str], Placement] = {}
    for item in work:
        for record in item.records:
            if record.node is None or (record.phase in FINISHED_TASK and not record.stopping):
                continue
            pod = claims.pod(item.job, record)
            # Whatever becomes of the hold, the task counts against its quotas while it may
            # run (on a node whose state is unknown, or while its stop is not yet confirmed):
            # the snapshot keeps it in a pseudo job (batch_snapshot.py).
            placement = placer.hold_placement(
                pod,
                record.node,
                record.gpus,
                record.gpu_milli,
                claims.held_allocations(item.job, record) if pod.claims else None,
            )
            if isinstance(placement, Placement):
                if not record.stopping:
                    held[(item.job.metadata.uid or "", record.name)] = placement
                continue
            problem = placement
            if record.stopping:
                continue
            if not inventory.is_ready(record.node) and not inventory.is_gone(record.node):
                continue  # its node's state is unknown: neither held anew nor given up
            log.warning("cannot hold %s of job %s: %s", record.name, item.job.name, problem)
            if record.phase in ACTIVE:
                # It may run where another task now is (a write-back lost in a crash): stopped,
                # and replaced only once its stop is confirmed.
                lost = apply(
                    record, Event.GIVEN_UP, Facts(inputs.now, problem, phase=TaskPhase.LOST)
                )
                item.set(lost.record)
                plan.stops += [stop] if (stop := lost.stop()) is not None else []
                item.event("TaskLost", f"{record.name}: {problem}", True)
            else:
                # A restart waiting for resources it no longer has: placed again, like a
                # replica beyond minAvailable (within the quotas), not started where it was.
                item.set(apply(record, Event.HOLD_LOST, Facts(inputs.now)).record)
    store = inputs.store
    tenants = {t.name: t for t in store.list_objects("Tenant", "") if isinstance(t, Tenant)}
    queues = {
        (q.tenant, q.name): q for q in store.list_objects("Queue", None) if isinstance(q, Queue)
    }
    users = [u for u in store.list_objects("User", None) if isinstance(u, User)]
    admission = Admission(tenants, queues, users)
    eligible = []
    for item in work:
        if item.phase is not None or item.ending:
            continue
        if not item.records:
            if item.facts.depends and not _dependencies_met(store, item, plan):
                continue  # jobs waiting for dependencies are not in the snapshot
            # only a job naming claims can miss one (ClaimBook.problem reads nothing else)
            missing = claims.problem(item.job) if item.facts.claims else None
            if missing is not None:  # claims that do not exist: nothing to place yet
                item.reason, item.message = "Unschedulable", missing
                continue
        if item.phase is None and not item.ending:
            eligible.append(item)
    session = batch_cycle.SessionInputs(
        inputs.batch, claims, inputs.policy, inputs.now, inputs.jobs_generation
    )
    batch_cycle.schedule(session, work, eligible, placer, admission, held, plan)
    return placer, plan


def _dependencies_met(store: Store, item: JobWork, plan: Plan) -> bool:
    """All of ``dependsOn`` succeeded; a failed or cancelled one fails this job (a failure of
    the plan)."""
    for name in item.job.spec.depends_on:
        other = store.find("Job", item.job.tenant, name)
        if not isinstance(other, Job):
            item.reason, item.message = "WaitingForDependencies", f"job {name} does not exist"
            return False
        phase = other.status.phase if other.status else JobPhase.PENDING
        if phase in (JobPhase.FAILED, JobPhase.CANCELLED):
            plan.failures.append((item, "DependencyFailed", f"job {name} {phase.value.lower()}"))
            return False
        if phase is not JobPhase.SUCCEEDED:
            item.reason = "WaitingForDependencies"
            item.message = f"waiting for job {name} ({phase.value})"
            return False
    return True
