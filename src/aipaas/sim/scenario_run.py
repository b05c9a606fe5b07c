"""``aipaas simulate run``: the scenario on a virtual clock, one session per event time.

Events: arrivals (a job listed in ``arrivals`` is submitted at its ``at``), completions (a
started job's tasks run its ``durations`` seconds; a job without one runs on), time limits (a
run longer than ``timeLimit`` ends Failed, reason TimeLimit) and evictions (an evicted job goes
back to Pending and, restarted, runs its whole duration again). At each distinct event time the
run applies that time's events, then runs one session (again, up to ``MAX_REPEATS`` times, while
a cycle evicts: reclaim may need a second look), and moves on to the next event; it also wakes
when a reservation starts or a running job passes its queue's ``minRuntime`` while work waits,
and (a cycle then runs although nothing waits) at the start when a node has a NoExecute taint
and when a toleration of one runs out (``Decisions.due``).

One SnapshotCluster and the model Jobs live across cycles: starts and evictions are already in
them when the session returns, completions release their placements here. Only the Session is
per cycle, so the loop costs what changes, not what exists (15,000 jobs in seconds); the
waiting backlog is kept grouped across cycles in a BacklogBook the sessions take it from.
"""

from __future__ import annotations

import gc
import heapq
from collections import defaultdict
from dataclasses import replace
from typing import Any, Final

from aipaas.scheduler.batch.backlog_book import BacklogBook
from aipaas.scheduler.batch.model import Decisions, Job, Resources, Snapshot
from aipaas.scheduler.batch.run import run_session
from aipaas.sim.scenario_build import Scenario
from aipaas.sim.scenario_records import Record, run_output

#: extra cycles at one instant while the previous one evicted something
MAX_REPEATS: Final = 2
_WAKE: Final = ""  # the event key of a wake-up (no job)
#: the event key of a wake-up for NoExecute taints: a cycle runs then even if nothing waits
_TAINT_WAKE: Final = "\0taint"


def _at(value: float) -> float:
    """Times on a 1 µs grid: 0.1 + 0.2 and 0.3 are one event time."""
    return round(value, 6)


class ScenarioRun:
    """The state of a run; ``run(until)`` drives it and returns the contract's JSON."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.engine = scenario.engine
        self.queues = dict(scenario.queues)
        self.now = scenario.now
        self.cycles = 0
        self.records = {key: Record(job.submitted) for key, job in scenario.jobs.items()}
        self.active: dict[str, Job] = {}
        #: ``active`` as the sessions take it: the waiting backlog grouped, kept up to date
        #: here (a session then costs what changed, not the whole backlog)
        self.book = BacklogBook()
        self.blocked: dict[str, tuple[str, ...]] = {}  # waiting for dependencies
        self.waiting: set[str] = set()  # active jobs with tasks not running
        self.succeeded: set[str] = set()
        self.events: list[tuple[float, int, str, int]] = []
        #: the cycles' reasons not yet written into ``records`` (a backlog's reasons come
        #: every cycle; they are read at the end): a later write to a record drops its entry
        self._reasons: dict[str, tuple[str, str]] = {}
        self._seq = 0
        self._woken: set[float] = set()
        self.allocated: dict[str, Resources] = defaultdict(Resources)  # by leaf queue
        self.used: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # gpu-s, cpu-s
        self.lineage = {key: self._lineage(key) for key in self.queues}
        self.decaying = [
            k
            for k, q in self.queues.items()
            if q.usage_half_life and scenario.options.usageOverTime
        ]
        self.min_runtime = any(q.min_runtime > 0 for q in self.queues.values())
        #: a cycle is due although nothing waits: NoExecute taints end running tasks (at the
        #: start, and when a toleration runs out)
        self._taints_due = any(t.effect == "NoExecute" for n in scenario.nodes for t in n.taints)
        arrivals = scenario.arrivals
        self.arrivals = sorted(
            (_at(arrivals[k]), job.order, k) for k, job in scenario.jobs.items() if k in arrivals
        )
        self._next_arrival = 0
        for key, job in scenario.jobs.items():
            if key in arrivals:
                continue
            self._submit(key, job)
            if job.is_running:
                self._account(job, job.allocated(), +1)
                self._count_before_now(job)
                self._begin_run(key, job, job.started if job.started is not None else self.now)

    # --- bookkeeping ---------------------------------------------------------------

    def _lineage(self, key: str) -> tuple[str, ...]:
        out = []
        current: str | None = key
        while current:  # the root "" is not reported
            out.append(current)
            current = self.queues[current].parent
        return tuple(out)

    def _count_before_now(self, job: Job) -> None:
        """What a job running at ``now`` used since it started: a queue's GPU-seconds are the
        sum over its jobs' timelines, which begin at ``since``, not at ``now``."""
        for task in job.running_tasks:
            elapsed = self.now - (task.since if task.since is not None else self.now)
            for key in self.lineage[job.queue]:
                used = self.used[key]
                used[0] += task.request.gpu_milli_total * elapsed / 1000
                used[1] += task.request.cpu_milli * elapsed / 1000

    def _push(self, time: float, key: str, generation: int) -> None:
        self._seq += 1
        heapq.heappush(self.events, (_at(time), self._seq, key, generation))

    def _submit(self, key: str, job: Job) -> None:
        needs = self.scenario.depends_on.get(key)
        if needs and not job.is_running and not all(n in self.succeeded for n in needs):
            self.blocked[key] = needs
            self._why(key, "WaitingForDependencies", f"waiting for {', '.join(needs)} to succeed")
            return
        self.active[key] = job
        self.book.add(job)
        if job.pending_tasks:
            self.waiting.add(key)

    def _why(self, key: str, reason: str, message: str) -> None:
        self._reasons.pop(key, None)
        record = self.records[key]
        record.reason, record.message = reason, message

    def _account(self, job: Job, amount: Resources, sign: int) -> None:
        current = self.allocated[job.queue]
        self.allocated[job.queue] = current + amount if sign > 0 else current - amount

    def _begin_run(self, key: str, job: Job, start: float) -> None:
        record = self.records[key]
        if record.run_start is not None:
            record.evictions += 1  # evicted and started again within one cycle
        record.run_start = start
        if record.started is None:
            record.started = start
        record.phase = "Running"
        record.evicted_why = None
        self._reasons.pop(key, None)
        record.reason = record.message = ""
        record.generation += 1
        duration = self.scenario.durations.get(key)
        ends = [start + d for d in (duration, job.time_limit) if d is not None]
        job.ends_at = None if job.time_limit is None else start + job.time_limit
        if ends:
            self._push(min(ends), key, record.generation)

    def _finish(self, key: str, job: Job, time: float) -> None:
        record = self.records[key]
        duration = self.scenario.durations.get(key)
        run = time - (record.run_start or 0.0)
        timed_out = job.time_limit is not None and (duration is None or duration > job.time_limit)
        for task in job.tasks:
            if task.placement is not None:
                self.engine.release(task.placement)
                self._account(job, task.resources, -1)
                task.placement = None
                task.since = None
        job.started = None
        del self.active[key]
        self.book.remove(job)
        self.waiting.discard(key)
        record.finished = time
        record.run_start = None
        record.phase = "Failed" if timed_out else "Succeeded"
        self._reasons.pop(key, None)
        record.reason = "TimeLimit" if timed_out else ""
        record.message = f"ran {run:g}s, its limit is {job.time_limit:g}s" if timed_out else ""
        if record.phase == "Succeeded":
            self.succeeded.add(key)
            if self.blocked:
                self._release_dependents()
        else:
            for waiting, needs in self.blocked.items():
                if key in needs:  # it waits for good: its dependency will never succeed
                    self._why(waiting, "DependencyFailed", f"dependency {key} ended Failed")

    def _release_dependents(self) -> None:
        for key, needs in list(self.blocked.items()):
            if all(n in self.succeeded for n in needs):
                del self.blocked[key]
                self._submit(key, self.scenario.jobs[key])

    def _advance(self, time: float) -> None:
        """Move the clock to ``time``, adding each queue's use over the interval."""
        dt = time - self.now
        if dt > 0:
            for leaf, held in self.allocated.items():
                if held.gpu_milli or held.cpu_milli:
                    for key in self.lineage[leaf]:
                        used = self.used[key]
                        used[0] += held.gpu_milli * dt / 1000
                        used[1] += held.cpu_milli * dt / 1000
            self._decay(dt)
        self.now = time

    def _decay(self, dt: float) -> None:
        """Decayed usage of the queues that count usage over time (half-life decay, then
        what they held over the interval)."""
        if not self.decaying:
            return
        held: dict[str, Resources] = defaultdict(Resources)
        for leaf, amount in self.allocated.items():
            for key in self.lineage[leaf]:
                held[key] = held[key] + amount
        for key in self.decaying:
            queue = self.queues[key]
            factor = 0.5 ** (dt / (queue.usage_half_life or 1.0))
            old, now = queue.decayed_usage.as_tuple(), held[key].as_tuple()
            usage = Resources(*(int(o * factor + n * dt) for o, n in zip(old, now, strict=True)))
            self.queues[key] = replace(queue, decayed_usage=usage)

    # --- the loop ------------------------------------------------------------------

    def _apply_events(self) -> None:
        while self.events and self.events[0][0] <= self.now:
            time, _, key, generation = heapq.heappop(self.events)
            if key == _WAKE:
                self._woken.discard(time)
                continue
            if key == _TAINT_WAKE:
                self._taints_due = True
                continue
            job = self.active.get(key)
            if job is not None and self.records[key].generation == generation:
                self._finish(key, job, max(time, self.now))
        while self._next_arrival < len(self.arrivals):
            at, _, key = self.arrivals[self._next_arrival]
            if at > self.now:
                break
            self._next_arrival += 1
            self._submit(key, self.scenario.jobs[key])

    def _cycle(self) -> Decisions:
        self.cycles += 1
        snapshot = Snapshot(
            self.now,
            self.scenario.nodes,
            self.queues,
            list(self.active.values()),
            self.scenario.users,
        )
        decisions = self._decide(snapshot)
        touched: dict[str, Job] = {}
        for start in decisions.started:
            job = self.active[start.job]
            touched[start.job] = job
            self._account(job, _task(job, start.task).resources, +1)
        for eviction in decisions.evicted:
            job = self.active[eviction.job]
            touched[eviction.job] = job
            self._account(job, _task(job, eviction.task).resources, -1)
            record = self.records[eviction.job]
            record.tasks_evicted += 1
            self._why(eviction.job, eviction.reason, f"by {eviction.by}: {eviction.message}")
        for key, job in touched.items():
            self.book.sync(job)
            record = self.records[key]
            if job.is_running and job.started != record.run_start:
                self._begin_run(key, job, self.now)
            elif not job.is_running and record.run_start is not None:
                record.evictions += 1
                record.run_start = None
                record.generation += 1
                record.phase = "Pending"
                record.evicted_why = (record.reason, record.message)
                job.ends_at = None
            if job.pending_tasks:
                self.waiting.add(key)
            else:
                self.waiting.discard(key)
        self._reasons.update(decisions.reasons)  # written into records by ``output``
        self._wake_later(decisions)
        return decisions

    def _decide(self, snapshot: Snapshot) -> Decisions:
        """One session on ``snapshot``, the backlog taken from the book kept here."""
        return run_session(snapshot, self.engine, self.scenario.options, book=self.book)

    def _wake_later(self, decisions: Decisions) -> None:
        """A later instant where waiting work may start with no event: a reservation's start,
        or a running job passing its queue's minRuntime (it may then be preempted); and one
        where a toleration of a NoExecute taint runs out (its task is then evicted)."""
        if decisions.due is not None and decisions.due > self.now:
            self._push(_at(decisions.due), _TAINT_WAKE, 0)
        if not self.waiting:
            return
        times = [r.start for r in decisions.reservations.values() if r.start > self.now]
        if self.min_runtime:
            for job in self.active.values():
                limit = self.queues[job.queue].min_runtime
                if limit and job.started is not None and job.started + limit > self.now:
                    times.append(job.started + limit)
        if times:
            self._wake_at(min(times))

    def _wake_at(self, time: float) -> None:
        wake = _at(time)
        if wake not in self._woken:
            self._woken.add(wake)
            self._push(wake, _WAKE, 0)

    def _next_time(self) -> float | None:
        while self.events:
            _, _, key, generation = self.events[0]
            if key in (_WAKE, _TAINT_WAKE) or (
                key in self.active and self.records[key].generation == generation
            ):
                break
            heapq.heappop(self.events)  # void: the job was evicted or finished since
        times = []
        if self.events:
            times.append(self.events[0][0])
        if self._next_arrival < len(self.arrivals):
            times.append(self.arrivals[self._next_arrival][0])
        return max(min(times), self.now) if times else None

    def run(self, until: float | None = None) -> dict[str, Any]:
        # The scenario's objects (tens of thousands of jobs and tasks) live to the end: the
        # collector's full passes would walk them again and again while each cycle makes its
        # short-lived garbage (a fifth of a 15,000-job run). They are set aside for the run.
        gc.freeze()
        try:
            return self._run(until)
        finally:
            gc.unfreeze()

    def _run(self, until: float | None) -> dict[str, Any]:
        if until is None or until >= self.now:
            while True:
                self._apply_events()
                repeats = 0
                while self.waiting or self._taints_due:
                    self._taints_due = False
                    decisions = self._cycle()
                    repeats += 1
                    if not decisions.evicted or repeats > MAX_REPEATS:
                        break
                upcoming = self._next_time()
                if upcoming is None or (until is not None and upcoming > until):
                    break
                self._advance(upcoming)
        if until is not None and until > self.now:
            self._advance(until)
        return self.output()

    def output(self) -> dict[str, Any]:
        return run_output(
            self.records, self._reasons, self.used, self.queues, self.now, self.cycles
        )


def _task(job: Job, name: str) -> Any:
    for task in job.tasks:
        if task.name == name:
            return task
    raise KeyError(f"{job.key} has no task {name}")


def run_scenario(scenario: Scenario, until: float | None = None) -> dict[str, Any]:
    """``simulate run``'s JSON for ``scenario`` (built with arrivals honoured)."""
    return ScenarioRun(scenario).run(until)
