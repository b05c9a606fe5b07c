"""The preempt action: within a leaf queue, a pending job evicts preemptible jobs of strictly
lower priority (equal priority never preempts) that ran at least the queue's minRuntime.

For each pending job in the cycle's order, ``victims.Search`` finds the fewest and cheapest
victims of its own queue that let its gang start (quota checked with the victims gone: they
free the queue's quota); the evictions and the starts are committed in one statement, or
nothing happens. Strict priority means a victim can never preempt its preemptor back.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.model import Eviction, Job, Resources, Task
from aipaas.scheduler.batch.ordering import JobOrder, ordered
from aipaas.scheduler.batch.session import resources_of
from aipaas.scheduler.batch.statement import touched_jobs
from aipaas.scheduler.batch.victim_search import Search
from aipaas.scheduler.batch.victims import (
    Unit,
    domains_for,
    eligible,
    preemptor_jobs,
    shape_of,
)

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session


def preempt(session: Session) -> None:
    protected = touched_jobs(session)
    running: dict[str, list[Job]] = defaultdict(list)
    #: per queue, the lowest priority among the jobs that may be taken at all (it only rises
    #: as victims go): a pending job at or below it has nothing to preempt
    lowest: dict[str, int] = {}
    for job in session.running:  # nothing started this cycle may be taken
        if eligible(session, job, protected):
            running[job.queue].append(job)
            lowest[job.queue] = min(lowest.get(job.queue, job.priority), job.priority)
    if not lowest:
        return

    #: per (queue, user, priority, gang request): it has victims that could free its quotas
    hopes: dict[tuple[str, str, int, Resources], bool] = {}

    gangs = session.pending_gangs()

    def hopeful(job: Job) -> bool:
        entry = gangs.get(job.key)
        if entry is None:
            return False
        gang = entry[0]
        key = (job.queue, job.user, job.priority, entry[1])
        found = hopes.get(key)
        if found is None:
            victims = [
                v
                for v in running[job.queue]
                if v.priority < job.priority and v.is_running and v.key not in protected
            ]
            found = hopes[key] = bool(victims) and _quota_reachable(session, job, gang, victims)
        return found

    jobs = preemptor_jobs(session, protected, above=lowest)  # ``may``, without a call each
    if not any(hopeful(job) for job in jobs):
        # None could start by any set of its victims: nothing changes without a preemption,
        # so none can all through the action (its searches would all fail).
        return
    failed: set[tuple[object, ...]] = set()
    order = ordered(session, jobs)
    for job in order:
        entry = gangs.get(job.key)
        if entry is None:
            continue
        gang = entry[0]
        shape = shape_of(job, gang)
        if shape is not None and shape in failed:
            _pass_alike(order, job, shape)
            continue
        victims = [
            v
            for v in running[job.queue]
            if v.priority < job.priority and v.is_running and v.key not in protected
        ]
        if not victims:
            _pass_alike(order, job, shape)
            continue
        if not _quota_reachable(session, job, gang, victims):
            if shape is not None:
                failed.add(shape)
                _pass_alike(order, job, shape)
            continue
        before = len(session.decisions.evicted)
        if _try(session, job, gang, victims):
            protected.add(job.key)
            protected.update(e.job for e in session.decisions.evicted[before:])
            failed.clear()  # the cluster changed: what failed may fit now
        elif shape is not None:
            failed.add(shape)


def _pass_alike(order: JobOrder, job: Job, shape: tuple[object, ...] | None) -> None:
    """Pass over the jobs that come next in ``job``'s queue with its shape (priority
    included): with nothing changed since ``job`` was passed over, each would be too."""
    if shape is None:
        return
    # Same kind: the same request shapes, as told by identity (shape_of's other parts apart).
    order.take_alike(job, priority=True, level=True)


def _quota_reachable(
    session: Session, job: Job, gang: Sequence[Task], victims: Sequence[Job]
) -> bool:
    """Every quota of the job's lineage would let its gang in with all ``victims`` gone (they
    are of its own queue: they free every level). When not, no search can succeed: its
    trials are skipped (a backlog blocked by a tenant's quota costs nothing to look at)."""
    freed = Resources()
    for victim in victims:
        freed = freed + victim.allocated()
    need = resources_of(gang)
    for key in session.lineage(job.queue):
        queue = session.queues.get(key)
        if queue is None or key == "":
            continue
        if not (session.allocated[key] - freed + need).fits_within(queue.quota):
            return False
    return True


def _try(session: Session, job: Job, gang: Sequence[Task], victims: Sequence[Job]) -> bool:
    need = Resources()
    for task in gang:
        need = need + task.resources

    def may_start(units: Sequence[Unit]) -> bool:
        return session.quota_problem(job, need) is None

    # A preemptor may not delay the reservation of a job of at least its priority (Slurm's
    # main scheduler goes in priority order; backfill protects what it reserved).
    allowed = session.reservations.allowed_by_priority(job)
    search = Search(session, job, gang, lambda unit: True, may_start, allowed)
    plan = search.best(session.policy.victim_order.units(victims), domains_for(session, job))
    if plan is None:
        return False

    def make(unit: Unit, task: Task) -> Eviction:
        victim = unit.job
        why = f"{job.key} (priority {job.priority} > {victim.priority}) in queue {job.queue}"
        if unit.extra:
            message = (
                f"elastic task {task.name} above minAvailable {victim.min_available} "
                f"given up for {why}"
            )
            return Eviction(victim.key, task.name, job.key, "ElasticShrink", message)
        return Eviction(victim.key, task.name, job.key, "Preempted", f"preempted by {why}")

    return search.carry_out(plan, make)
