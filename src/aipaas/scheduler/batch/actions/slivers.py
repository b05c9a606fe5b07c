"""Reclaim from shared GPUs: the last step of the reclaim action (batch/actions/reclaim.py).

Pods that take a share of one GPU leave the rest of it idle until a pod that fits the rest
comes. With GPUs shared by the pods of several queues, capacity can sit idle that way in
slivers no queue holds: every queue is below its fair share (the slivers are the share that
went missing), so reclaim, which takes only from a queue above its share, finds no victim;
and preempt, which takes only within the preemptor's own leaf queue, cannot empty a GPU whose
other sharers belong to other queues. A job that needs a whole GPU then waits until pods end.

The rule: a pending job that asks for GPUs, whose queue (and every ancestor) stays at or below
its fair share after it starts (its victims gone), may evict jobs of any queue that are
preemptible, of strictly lower priority than it, eligible as for preempt (minRuntime, not
touched this cycle) and that hold only shares of GPUs (every running task a fraction of one
GPU), besides the lower-priority jobs of its own queue, when the idle slivers of shared GPUs
add up to at least the GPUs it asks for (its share is stranded there). The fewest and
cheapest victims are chosen as preempt chooses them (``victim_search.Search``), in one
statement with the start.

What it leaves alone: a cluster of whole-GPU or CPU-only jobs (no victim holds a share of a
GPU), a job that would go above its fair share, a victim of equal or higher priority. No loop:
a victim has a lower priority than its preemptor, so it can never take the preemptor back by
this rule, and reclaim cannot either (the preemptor's queue ends at or below its share).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.explain import amount
from aipaas.scheduler.batch.model import Eviction, Job, Resources, Task
from aipaas.scheduler.batch.ordering import ordered
from aipaas.scheduler.batch.reservations_fit import PerGpuFree
from aipaas.scheduler.batch.statement import touched_jobs
from aipaas.scheduler.batch.victim_search import Search
from aipaas.scheduler.batch.victims import (
    Unit,
    domains_for,
    eligible,
    preemptor_jobs,
    shape_of,
)
from aipaas.scheduler.framework.types import MILLI_PER_GPU, PodRequest

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session


def idle_slivers(session: Session) -> int:
    """GPU milli left idle on GPUs that running shared pods take part of (whole GPUs free
    and GPUs held whole are not slivers)."""
    used: dict[tuple[str, int], int] = defaultdict(int)
    for job in session.running:
        for task in job.tasks:
            where = task.placement
            if where is not None and where.gpu_milli < MILLI_PER_GPU:
                for gpu in where.gpus:
                    used[(where.node, gpu)] += where.gpu_milli
    return sum(MILLI_PER_GPU - milli for milli in used.values() if milli < MILLI_PER_GPU)


def _shares_only(job: Job) -> bool:
    """Every running task of ``job`` holds a share of one GPU."""
    running = job.running_tasks
    return bool(running) and all(t.request.is_shared for t in running)


def could_fit(session: Session, gang: Sequence[Task], victims: Sequence[Job]) -> bool:
    """A cheap necessary condition for a search to succeed: each pod of the gang fits alone on
    a node that holds victims, with every victim there gone (True when the engine cannot tell
    free milli per GPU). Most preemptors fail here, before a trial placement."""
    engine = session.engine
    if not isinstance(engine, PerGpuFree):
        return True
    freed: dict[str, list[int]] = {}  # node -> [cpu, memory, then milli per GPU]
    for victim in victims:
        for task in victim.running_tasks:
            where = task.placement
            if where is None:
                continue
            room = freed.get(where.node)
            if room is None:
                free = engine.free(where.node)
                room = freed[where.node] = [
                    free.cpu_milli,
                    free.memory_mib,
                    *engine.gpus_free(where.node),
                ]
            room[0] += where.cpu_milli
            room[1] += where.memory_mib
            for gpu in where.gpus:
                room[2 + gpu] += where.gpu_milli
    models = {node.name: node.gpu_model for node in engine.nodes}
    for task in gang:
        pod = task.request
        if not any(_fits(pod, room, models[node]) for node, room in freed.items()):
            return False
    return True


def _fits(pod: PodRequest, room: Sequence[int], model: str) -> bool:
    if pod.cpu_milli > room[0] or pod.memory_mib > room[1]:
        return False
    if pod.gpu_models and model not in pod.gpu_models:
        return False
    gpus = room[2:]
    if pod.is_shared:
        return max(gpus, default=0) >= pod.gpu_milli
    return sum(1 for milli in gpus if milli >= MILLI_PER_GPU) >= pod.gpu_count


def reclaim_slivers(session: Session) -> None:
    """Start pending jobs by the rule of the module docstring, in the session's order."""
    if session.allocated[""].gpu_milli == 0:
        return  # no GPU held (a CPU cluster): no sliver, at no cost
    protected = touched_jobs(session)
    idle = idle_slivers(session)
    if idle < MILLI_PER_GPU:
        return  # less than one GPU stranded: no job's share lies in slivers
    takeable = [j for j in session.running if eligible(session, j, protected)]
    sharers = [j for j in takeable if _shares_only(j)]
    if not sharers:
        return
    lowest = min(j.priority for j in sharers)
    gangs = session.pending_gangs()
    #: per (queue, priority): what the queue's own lower-priority victims hold (at most what
    #: they free of its share)
    freeable: dict[tuple[str, int], Resources] = {}

    def within_share(job: Job, need: Resources) -> bool:
        """Its queue could stay at or below its fair share after the start, its own victims
        gone (the search checks the victims it chooses)."""
        key = (job.queue, job.priority)
        own = freeable.get(key)
        if own is None:
            own = Resources()
            for victim in takeable:
                mine = victim.queue == job.queue and victim.priority < job.priority
                if mine and victim.is_running and victim.key not in protected:
                    own = own + victim.allocated()
            freeable[key] = own
        return session.fair_share_problem(job, need - own) is None

    def may(job: Job) -> bool:
        entry = gangs.get(job.key)
        return (
            job.priority > lowest
            and entry is not None
            and 0 < entry[1].gpu_milli <= idle
            and within_share(job, entry[1])
        )

    jobs = preemptor_jobs(session, protected, may)
    if not jobs:
        return
    failed: set[tuple[object, ...]] = set()
    for job in ordered(session, jobs):
        entry = gangs.get(job.key)
        if entry is None or job.key in protected:
            continue
        gang, need = entry
        shape = shape_of(job, gang)
        if shape is not None and shape in failed:
            continue
        if need.gpu_milli > idle or not within_share(job, need):
            continue  # a start before it changed what it would hold, or what lies idle
        victims = [
            v
            for v in takeable
            if v.priority < job.priority
            and v.is_running
            and v.key not in protected
            and (v.queue == job.queue or _shares_only(v))
        ]
        if not any(v.queue != job.queue for v in victims):
            continue  # its own queue's alone: preempt has tried those
        if not could_fit(session, gang, victims):
            if shape is not None:
                failed.add(shape)
            continue
        before = len(session.decisions.evicted)
        if _try(session, job, gang, need, victims, idle):
            protected.add(job.key)
            protected.update(e.job for e in session.decisions.evicted[before:])
            idle = idle_slivers(session)
            failed.clear()  # the cluster changed: what failed may fit now
            freeable.clear()
            if idle < MILLI_PER_GPU:
                return
        elif shape is not None:
            failed.add(shape)


def _try(
    session: Session,
    job: Job,
    gang: Sequence[Task],
    need: Resources,
    victims: Sequence[Job],
    idle: int,
) -> bool:
    def may_start(units: Sequence[Unit]) -> bool:
        # With the victims gone (its own queue's free its share too): within quota and share.
        return (
            session.quota_problem(job, need) is None
            and session.fair_share_problem(job, need) is None
        )

    # As preempt: it may not delay the reservation of a job of at least its priority.
    allowed = session.reservations.allowed_by_priority(job)
    search = Search(session, job, gang, lambda unit: True, may_start, allowed)
    plan = search.best(session.policy.victim_order.units(victims), domains_for(session, job))
    if plan is None:
        return False
    share = session.fair_share.get(job.queue, Resources())
    held = session.allocated[job.queue]
    gpus = amount(idle, 1000)
    context = (
        f"queue {job.queue} holds {amount(held.gpu_milli, 1000)} of its fair share of "
        f"{amount(share.gpu_milli, 1000)} GPUs; the idle slivers of shared GPUs add up to "
        f"{gpus} GPU{'' if idle == MILLI_PER_GPU else 's'}"
    )

    def make(unit: Unit, task: Task) -> Eviction:
        victim = unit.job
        why = f"{job.key} (priority {job.priority} > {victim.priority})"
        if victim.queue == job.queue:
            return Eviction(
                victim.key, task.name, job.key, "Preempted", f"preempted by {why}: {context}"
            )
        message = f"reclaimed from a shared GPU by {why}: {context}"
        return Eviction(victim.key, task.name, job.key, "Reclaimed", message)

    return search.carry_out(plan, make)
