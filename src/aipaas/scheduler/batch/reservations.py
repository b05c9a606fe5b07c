"""Backfill reservations (EASY, as Slurm's backfill scheduler): when a gang cannot start for
lack of room, it is given the earliest time it can start and the nodes it would use then;
later jobs may start now only where they cannot delay it.

The future is read from time limits: a running job ends at ``ends_at`` (when the caller knows
it) or ``started + time_limit``; a running job without a time limit never ends as far as
reservations know. ``reserve`` walks those ends in time order, adding back what each ending
job frees on its nodes, and takes the first time at which the gang fits (tasks largest first,
each on the first node, in node order, with room for its GPUs, CPU and memory; inside one
domain of its ``topology_required`` level when it has one; reservations_fit.py) and at which
its queue, and every ancestor, would be within its fair share as allocate demands (what they
hold falls as their jobs end): a job refused for fair share now is reserved for when it will
not be, and a queue that stays above its share gets no reservation to block others with.

How many: each leaf queue holds at most its ``QueueNode.reservations`` at once (default 1,
the model's default: EASY per queue; 0: its jobs never reserve). There is no cluster-wide
cap; a later reservation respects the earlier ones (it uses their nodes only if it would end
before they start, or after they end).

``allowed_nodes`` keeps reservations whole: a job whose expected end (``now + time_limit``,
or its run's end for a running elastic job) is at or before a reservation's start may use that
reservation's nodes; otherwise it may use only nodes no such reservation holds. A job without
a time limit therefore never starts on reserved nodes. The reserved job itself is free.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.model import Job, Reservation, Resources, Task
from aipaas.scheduler.batch.reservations_fit import fit, give_back, groups, rooms_now, size, total
from aipaas.scheduler.framework.types import PodRequest

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session


@dataclass(slots=True)
class _Ending:
    """Running jobs whose runs end at ``at``."""

    at: float
    jobs: list[Job] = field(default_factory=list)


class _Shares:
    """Fair share over the walk: the job's queue and each ancestor (the root aside) may not
    hold more than its fair share of what the gang asks for, after the start, as allocate
    demands; what they hold falls as their jobs end. Without fair shares (``fifo``, or none
    computed) nothing is checked."""

    def __init__(self, session: Session, job: Job, gang: Resources) -> None:
        self.session = session
        shares = {} if session.options.fairShare == "fifo" else session.fair_share
        self.limits = {k: shares[k] for k in session.lineage(job.queue) if k and k in shares}
        self.held = {k: session.allocated[k] for k in self.limits}
        self.gang = gang

    def release(self, job: Job) -> None:
        if not self.limits:
            return
        amount = job.allocated()
        for key in self.session.lineage(job.queue):
            if key in self.held:
                self.held[key] = self.held[key] - amount

    def ok(self) -> bool:
        for key, share in self.limits.items():
            after = self.held[key] + self.gang
            for want, used, fair in zip(
                self.gang.as_tuple(), after.as_tuple(), share.as_tuple(), strict=True
            ):
                if want > 0 and used > fair:
                    return False
        return True


def run_end(job: Job) -> float | None:
    """The expected end of a running job's current run (None: it never ends, as far as the
    scheduler knows)."""
    if job.ends_at is not None:
        return job.ends_at
    if job.time_limit is None:
        return None
    started = job.started
    if started is None:
        since = [t.since for t in job.tasks if t.running and t.since is not None]
        if not since:
            return None
        started = min(since)
    return started + job.time_limit


def _gang(job: Job) -> list[Task]:
    """The tasks that must start together for a job that does not run yet (as
    ``session.gang_tasks``)."""
    return job.pending_tasks[: job.min_available]


class Reservations:
    """The cycle's reservations. ``allowed_nodes(job)``: the nodes ``job`` may start on now
    without delaying a reservation (None: any); ``reserve(job)``: give a job that cannot start
    for lack of room a reservation at the earliest time it can (None if it gets none)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.held: dict[str, Reservation] = {}
        self._allowed: dict[frozenset[str], frozenset[str]] = {}
        self._was_running: list[Job] | None = None
        self._never: set[tuple[object, ...]] = set()

    # --- what later jobs may use ------------------------------------------------------

    def expected_end(self, job: Job) -> float:
        """When ``job`` would end if it started now (inf without a time limit); a running
        (elastic) job's extras end with its run."""
        if job.is_running:
            end = run_end(job)
            return math.inf if end is None else end
        if job.time_limit is None:
            return math.inf
        return self.session.now + job.time_limit

    def allowed_nodes(self, job: Job) -> frozenset[str] | None:
        if not self.held or job.key in self.held:
            return None
        end = self.expected_end(job)
        # Ending at or before a reservation's start cannot delay it.
        blocking = frozenset(k for k, r in self.held.items() if end > r.start)
        if not blocking:
            return None
        allowed = self._allowed.get(blocking)
        if allowed is None:
            taken = {n for k in blocking for n in self.held[k].nodes}
            allowed = frozenset(n.name for n in self.session.engine.nodes if n.name not in taken)
            self._allowed[blocking] = allowed
        return allowed

    # --- making and dropping reservations ---------------------------------------------

    def reserve(self, job: Job) -> Reservation | None:
        held = self.held.get(job.key)
        if held is not None:
            return held
        queue = self.session.queues.get(job.queue)
        limit = queue.reservations if queue is not None else 1
        if limit <= 0 or job.is_running:
            return None
        if sum(1 for r in self.held.values() if self._queue_of(r) == job.queue) >= limit:
            return None
        tasks = _gang(job)
        if not tasks:
            return None
        pods = [t.request for t in tasks]
        # A shape that found no time stays without one until the cluster or the reservations
        # change: a backlog of same-shaped jobs costs one walk.
        decisions = self.session.decisions
        memo = (
            tuple((*p.shape, p.memory_mib) for p in pods),
            job.topology_required,
            job.time_limit,
            frozenset(self.held),
            len(decisions.started),
            len(decisions.evicted),
        )
        if memo in self._never:
            return None
        found = self._earliest(job, pods)
        if found is None:
            self._never.add(memo)
            return None
        start, nodes = found
        reservation = Reservation(job.key, start, tuple(nodes))
        self.held[job.key] = reservation
        self._allowed.clear()
        return reservation

    def drop(self, key: str) -> None:
        """Forget a job's reservation (it started, or left the cycle)."""
        if self.held.pop(key, None) is not None:
            self._allowed.clear()

    def refresh(self) -> None:
        """Work every reservation out again, in the order they were made, on the cluster as it
        is now (after preemption or reclaim changed it); jobs that started lose theirs."""
        before = list(self.held.values())
        self.held.clear()
        self._allowed.clear()
        for old in before:
            job = self.session.jobs.get(old.job)
            if job is not None and not job.is_running and job.pending_tasks:
                self.reserve(job)

    # --- the time walk ------------------------------------------------------------------

    def _queue_of(self, reservation: Reservation) -> str | None:
        job = self.session.jobs.get(reservation.job)
        return job.queue if job is not None else None

    def _running_jobs(self) -> Iterable[Job]:
        """Jobs that run now: those of the snapshot, and those started this cycle."""
        if self._was_running is None:
            self._was_running = [j for j in self.session.jobs.values() if j.is_running]
        seen: set[str] = set()
        started = (self.session.jobs.get(s.job) for s in self.session.decisions.started)
        for job in [*self._was_running, *started]:
            if job is not None and job.key not in seen and job.is_running:
                seen.add(job.key)
                yield job

    def _endings(self) -> list[_Ending]:
        now = self.session.now
        by_time: dict[float, _Ending] = {}
        for job in self._running_jobs():
            end = run_end(job)
            if end is None:
                continue
            at = max(end, now)  # overdue: it is stopped at once
            by_time.setdefault(at, _Ending(at)).jobs.append(job)
        return [by_time[at] for at in sorted(by_time)]

    def _earliest(self, job: Job, pods: Sequence[PodRequest]) -> tuple[float, list[str]] | None:
        """The first time (now or a future end) at which ``pods`` fit and the job's queue is
        within its fair share, and the nodes used."""
        now = self.session.now
        nodes = list(self.session.engine.nodes)
        domains = groups(nodes, job.topology_required)
        if not domains:
            return None
        rooms = rooms_now(self.session.engine)
        endings = self._endings()
        others = [(r, self._end(r)) for r in self.held.values()]
        times = sorted(
            {now, *(e.at for e in endings), *(end for _, end in others if now < end < math.inf)}
        )
        duration = job.time_limit if job.time_limit is not None else math.inf
        ordered = sorted(pods, key=size, reverse=True)
        shares = _Shares(self.session, job, total(pods))
        next_ending = 0
        for at in times:
            while next_ending < len(endings) and endings[next_ending].at <= at:
                for ended in endings[next_ending].jobs:
                    for task in ended.running_tasks:
                        give_back(rooms, task)
                    shares.release(ended)
                next_ending += 1
            if not shares.ok():
                continue
            # Another reservation's nodes are out while its window overlaps this run.
            blocked = {
                n for r, end in others if at < end and r.start < at + duration for n in r.nodes
            }
            for group in domains:
                used = fit(ordered, [n for n in group if n not in blocked], rooms)
                if used is not None:
                    return at, [n.name for n in nodes if n.name in used]
        return None

    def _end(self, reservation: Reservation) -> float:
        """When a reserved job would end (inf without a time limit)."""
        job = self.session.jobs.get(reservation.job)
        if job is None or job.time_limit is None:
            return math.inf
        return reservation.start + job.time_limit
