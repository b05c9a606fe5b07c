"""Backfill reservations (EASY, as Slurm's backfill scheduler): when a gang cannot start for
lack of room, it is given the earliest time it can start and the nodes it would use then;
later jobs may start now only where they cannot delay it.

The future is read from time limits: a running job ends at ``ends_at`` (when the caller knows
it) or ``started + time_limit``; a running job without a time limit never ends as far as
reservations know. ``reserve`` walks those ends in time order, adding back what each ending
job frees on its nodes, and takes the first end (not now: the job was just refused now, and
the engine judges now better) at which the gang fits (tasks largest first,
each on the first node, in node order, with room for its GPUs, CPU and memory; inside one
domain of its ``topology_required`` level when it has one; reservations_fit.py) and at which
its queue, and every ancestor, would be within its fair share as allocate demands (what they
hold falls as their jobs end): a job refused for fair share now is reserved for when it will
not be, and a queue that stays above its share gets no reservation to block others with.
Gangs with device claims get none (the fit cannot see devices), unless their claims amount
to whole GPUs by count (``Task.fit``: the live controller's ``gpu:`` short form on a cluster
that publishes slices); a running task gives back the GPUs its claims hold
(``Task.device_gpus``) as well as its placement's.

Only profiles that run the backfill action hold reservations. How many: each leaf queue
holds at most its ``QueueNode.reservations`` at once (default 1, the model's default: EASY
per queue; 0: its jobs never reserve). There is no cluster-wide cap; a later reservation
respects the earlier ones (it uses their nodes only if it would end before they start, or
after they end).

``allowed_nodes`` keeps reservations whole: a job whose expected end (``now + time_limit``,
or its run's end for a running elastic job) is at or before a reservation's start may use that
reservation's nodes; otherwise it may use only nodes no such reservation holds. A job without
a time limit therefore never starts on reserved nodes. The reserved job itself is free.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.model import Job, Reservation, Resources, Task
from aipaas.scheduler.batch.reservations_fit import (
    Ending,
    Room,
    Shares,
    fit,
    give_back,
    groups,
    rooms_now,
    size,
    total,
)
from aipaas.scheduler.batch.session_view import SessionPlan
from aipaas.scheduler.framework.types import PodRequest

if TYPE_CHECKING:
    from aipaas.scheduler.batch.cluster import PlacementEngine


@dataclass(slots=True)
class _View:
    """The cluster as reservations see it while no start or eviction changes it: the future
    ends in time order, what is free now, and each node's room after the first k ends (kept
    for the walks that follow: they test the same times). Rooms are read from the engine only
    when a walk needs them (a cluster without time limits never does)."""

    state: tuple[int, int]
    endings: list[Ending]
    engine: PlacementEngine
    rooms: dict[int, dict[str, Room]] = field(default_factory=dict)
    _free: Resources | None = None

    @property
    def free(self) -> Resources:
        if self._free is None:
            rooms = self.rooms_after(0)
            self._free = Resources(
                sum(sum(r.gpus) for r in rooms.values()),
                sum(r.cpu for r in rooms.values()),
                sum(r.memory for r in rooms.values()),
            )
        return self._free

    def rooms_after(self, k: int) -> dict[str, Room]:
        if not self.rooms:
            self.rooms[0] = rooms_now(self.engine)
        known = self.rooms.get(k)
        if known is not None:
            return known
        start = max(j for j in self.rooms if j <= k)
        rooms = dict(self.rooms[start])  # Rooms shared until an end changes one
        copied: set[str] = set()
        for ending in self.endings[start:k]:
            for placement in ending.placements:
                give_back(rooms, copied, placement)
        if len(self.rooms) < _ROOMS_KEPT:
            self.rooms[k] = rooms
        return rooms


#: How many node-room maps a view keeps (each is a map of every node).
_ROOMS_KEPT = 32


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

    def __init__(self, session: SessionPlan) -> None:
        self.session = session
        self.held: dict[str, Reservation] = {}
        self._per_queue: dict[str, int] = {}
        #: evictions committed when each reservation was made: later ones call for a refresh
        self._evictions_seen: dict[str, int] = {}
        #: nodes allowed to a job ending after the first k reservation starts (by start)
        self._allowed: list[frozenset[str] | None] = []
        self._ordered: list[Reservation] = []
        self._starts: list[float] = []
        self._taken: set[str] = set()
        self._never: set[tuple[object, ...]] = set()
        self._ending: dict[str, Job] | None = None
        self._groups: dict[str | None, list[list[str]]] = {}
        self._started_seen = 0
        #: the cluster now and its future ends, kept while no start or eviction changes them
        self._view: _View | None = None
        self._pruned_at = (0, 0)

    # --- what later jobs may use ------------------------------------------------------

    def expected_end(self, job: Job) -> float:
        """When ``job`` would end if it started now (inf without a time limit); a running
        (elastic) job's extras end with its run."""
        if job.is_running:
            end = self._run_end(job)
            return math.inf if end is None else end
        if job.time_limit is None:
            return math.inf
        return self.session.now + job.time_limit

    def allowed_nodes(self, job: Job) -> frozenset[str] | None:
        self._prune()
        if not self.held:
            return None
        if job.key in self.held:
            return self._off_reserved(job, lambda holder: True)
        if not self._allowed:
            self._ordered = sorted(self.held.values(), key=lambda r: r.start)
            self._starts = [r.start for r in self._ordered]
            self._taken = set()
            self._allowed = [None]
        # Ending at or before a reservation's start cannot delay it: the k reservations that
        # start before the job's end keep it off their nodes (worked out as far as asked).
        k = bisect_left(self._starts, self.expected_end(job))
        while len(self._allowed) <= k:
            self._taken.update(self._ordered[len(self._allowed) - 1].nodes)
            names = (n.name for n in self.session.engine.nodes)
            self._allowed.append(frozenset(n for n in names if n not in self._taken))
        return self._allowed[k]

    def allowed_by_priority(self, job: Job) -> frozenset[str] | None:
        """Where ``job`` may start now by evicting others (preempt): off the nodes of the
        reservations of jobs of at least its priority that start before it would end. Such
        jobs come before it in every order, so it may not delay them; a reservation of a
        lower-priority job does not bind it (allocate would have placed it first)."""
        self._prune()
        if not self.held:
            return None
        return self._off_reserved(
            job, lambda holder: holder is None or holder.priority >= job.priority
        )

    def _off_reserved(
        self,
        job: Job,
        binds: Callable[[Job | None], bool],
    ) -> frozenset[str] | None:
        """All nodes but those of the other reservations that start before ``job`` would end
        and whose holder ``binds`` it (None: no node is kept from it). A job holding a
        reservation of its own (one refused for fair share, say) may use its own nodes now,
        but not an earlier reservation's."""
        end = self.expected_end(job)
        jobs = self.session.jobs
        taken = {
            node
            for reservation in self.held.values()
            if reservation.job != job.key
            and reservation.start < end
            and binds(jobs.get(reservation.job))
            for node in reservation.nodes
        }
        if not taken:
            return None
        return frozenset(n.name for n in self.session.engine.nodes if n.name not in taken)

    # --- making and dropping reservations ---------------------------------------------

    def reserve(self, job: Job) -> Reservation | None:
        self._prune()
        held = self.held.get(job.key)
        if held is not None:
            return held
        if "backfill" not in self.session.options.actions:
            return None  # reservations are what backfill keeps whole: none without it
        queue = self.session.queues.get(job.queue)
        limit = queue.reservations if queue is not None else 1
        if limit <= self._per_queue.get(job.queue, 0) or job.is_running:
            return None
        if not self.held and not self._now_and_ends().endings:
            return None  # nothing running ever ends: no time would be better than now
        pods = [t.fit or t.request for t in _gang(job)]
        # The fit knows no device claims: it could promise room that is not there (claims
        # that are whole GPUs by another name come as ``Task.fit``, by count).
        if not pods or any(p.claims for p in pods):
            return None
        # A shape that found no time stays without one until the cluster or the reservations
        # change: a backlog of same-shaped jobs costs one walk.
        memo = (
            tuple(p.fit_key for p in pods),
            job.topology_required,
            job.time_limit,
            job.queue,
            frozenset(self.held),
            self._state(),
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
        self._per_queue[job.queue] = self._per_queue.get(job.queue, 0) + 1
        self._evictions_seen[job.key] = len(self.session.decisions.evicted)
        self._allowed = []
        return reservation

    def gives_none(self, job: Job) -> bool:
        """``reserve(job)`` would make no reservation whatever the job's gang: no backfill
        action, its queue holds all it may, or nothing is held and nothing running ever ends
        (a cheap test, for long backlogs; the cluster as of the last ``reserve``)."""
        if "backfill" not in self.session.options.actions:
            return True
        queue = self.session.queues.get(job.queue)
        limit = queue.reservations if queue is not None else 1
        if limit <= self._per_queue.get(job.queue, 0):
            return True
        return not self.held and not self._now_and_ends().endings

    def drop(self, key: str) -> None:
        """Forget a job's reservation (it started, or left the cycle)."""
        reservation = self.held.pop(key, None)
        if reservation is None:
            return
        self._evictions_seen.pop(key, None)
        job = self.session.jobs.get(key)
        if job is not None:
            self._per_queue[job.queue] -= 1
        self._allowed = []

    def refresh(self) -> None:
        """After preemption or reclaim: jobs that started lose their reservations, and when
        something was evicted since a reservation was made, every one is worked out again, in
        the order they were made, on the cluster as it is now."""
        evicted = len(self.session.decisions.evicted)
        stale = any(seen < evicted for seen in self._evictions_seen.values())
        before = list(self.held.values())
        for old in before:
            job = self.session.jobs.get(old.job)
            if stale or job is None or job.is_running or not job.pending_tasks:
                self.drop(old.job)
        if not stale:
            return
        for old in before:
            job = self.session.jobs.get(old.job)
            if job is not None and not job.is_running and job.pending_tasks:
                self.reserve(job)

    def _prune(self) -> None:
        """A reserved job that started since (borrowing, preemption) holds nothing any more."""
        state = self._state()
        if state == self._pruned_at:
            return
        self._pruned_at = state
        for key in [k for k in self.held if (j := self.session.jobs.get(k)) and j.is_running]:
            self.drop(key)

    # --- the time walk ------------------------------------------------------------------

    def _run_end(self, job: Job) -> float | None:
        """``run_end``, but a run that began in this cycle ends its time limit from now (an
        ``ends_at`` left from an earlier run would be stale)."""
        now = self.session.now
        if job.started == now and job.time_limit is not None:
            return now + job.time_limit
        return run_end(job)

    def _state(self) -> tuple[int, int]:
        decisions = self.session.decisions
        return (len(decisions.started), len(decisions.evicted))

    def _ending_jobs(self) -> Iterable[Job]:
        """Running jobs whose runs end (a time limit): those of the snapshot, found once, and
        those started this cycle, added as they come; evicted ones are skipped."""
        if self._ending is None:
            self._ending = {
                j.key: j
                for j in self.session.jobs.values()
                if j.is_running and self._run_end(j) is not None
            }
        started = self.session.decisions.started
        for start in started[self._started_seen :]:
            job = self.session.jobs.get(start.job)
            if job is not None and self._run_end(job) is not None:
                self._ending[job.key] = job
        self._started_seen = len(started)
        return (j for j in self._ending.values() if j.is_running)

    def _now_and_ends(self) -> _View:
        """The future ends in time order (and, when asked, each node's room now)."""
        state = self._state()
        view = self._view
        if view is not None and view.state == state:
            return view
        if view is not None and view.state[1] == state[1] and self._ending is not None:
            # Only starts since: each started task ends with its job's run (a time limit) and
            # is added to its end; nothing ended or left (a start changes the rooms only).
            self._view = self._with_starts(view, state)
            return self._view
        now = self.session.now
        by_time: dict[float, Ending] = {}
        lineages: dict[str, list[str]] = {}
        for job in self._ending_jobs():
            end = self._run_end(job)
            if end is not None:
                at = max(end, now)  # overdue: it is stopped at once
                lineage = lineages.get(job.queue)
                if lineage is None:
                    lineage = lineages[job.queue] = list(self.session.lineage(job.queue))
                by_time.setdefault(at, Ending(at)).add(job, lineage)
        endings = [by_time[at] for at in sorted(by_time)]
        self._view = _View(state, endings, self.session.engine)
        return self._view

    def _with_starts(self, view: _View, state: tuple[int, int]) -> _View:
        """``view`` with the tasks started since it was made added to their runs' ends (what
        a rebuild would find: the same endings, the same sums)."""
        endings = view.endings
        by_time = {e.at: e for e in endings}
        now = self.session.now
        for start in self.session.decisions.started[view.state[0] : state[0]]:
            job = self.session.jobs.get(start.job)
            if job is None:
                continue
            end = self._run_end(job)
            if end is None:
                continue
            if self._ending is not None:  # always, once a view was made
                self._ending[job.key] = job
            task = next(t for t in job.tasks if t.name == start.task)
            if task.placement is None:
                continue
            at = max(end, now)
            ending = by_time.get(at)
            if ending is None:
                ending = by_time[at] = Ending(at)
                insort(endings, ending, key=lambda e: e.at)
            ending.add_task(task, self.session.lineage(job.queue))
        return _View(state, endings, self.session.engine)

    def _earliest(self, job: Job, pods: Sequence[PodRequest]) -> tuple[float, list[str]] | None:
        """The first future end (or now, for jobs overdue) at which ``pods`` fit and the job's
        queue is within its fair share, and the nodes used. Not now otherwise: the job was
        just refused now, and the fit is no better judge than the engine."""
        view = self._now_and_ends()
        endings = view.endings
        others = [(r, self._end(r)) for r in self.held.values()]
        times = sorted(
            {*(e.at for e in endings), *(end for _, end in others if self.session.now < end)}
            - {math.inf}
        )
        if not times:
            return None  # nothing ever ends: no later time is better than now
        nodes = self.session.engine.nodes
        domains = self._groups.get(job.topology_required)
        if domains is None:
            domains = self._groups[job.topology_required] = groups(nodes, job.topology_required)
        if not domains:
            return None
        free = view.free
        duration = job.time_limit if job.time_limit is not None else math.inf
        ordered = sorted(pods, key=size, reverse=True)
        gang = total(pods)
        need = Resources(gang.gpu_milli, gang.cpu_milli, gang.memory_mib)
        shares = Shares(self.session, job, gang)
        next_ending = 0  # endings counted in ``free`` and ``shares``
        for at in times:
            while next_ending < len(endings) and endings[next_ending].at <= at:
                ending = endings[next_ending]
                free = free + ending.freed
                shares.release(ending)
                next_ending += 1
            if not need.fits_within(free) or not shares.ok():
                continue
            rooms = view.rooms_after(next_ending)
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
