"""A Statement: changes an action proposes over the snapshot, committed whole or discarded.

As Volcano's Statement: an action evicts victims and places its preemptor inside one
statement; if the preemptor cannot start after all, ``discard`` gives every victim its
placement back and nothing was evicted. Only ``commit`` makes the changes decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

from aipaas.scheduler.batch.model import Eviction, Job, Resources, Start, Task
from aipaas.scheduler.batch.session_view import SessionLedger
from aipaas.scheduler.framework.types import Placement


@dataclass(slots=True)
class _Op:
    job: Job
    task: Task
    placement: Placement
    since: float | None
    job_started: float | None
    eviction: Eviction | None  # None: a start
    #: GPUs a start's DRA claims were given, counted against quotas (``Session.claimed``)
    claimed: Resources | None = None


class Statement:
    """Open on a session; every change is applied to the session at once (so later checks
    see it) and remembered, to be undone by ``discard`` or made decisions by ``commit``."""

    def __init__(self, session: SessionLedger) -> None:
        self.session = session
        self._ops: list[_Op] = []
        self._open = True

    @property
    def evictions(self) -> list[Eviction]:
        return [op.eviction for op in self._ops if op.eviction is not None]

    @property
    def starts(self) -> list[Start]:
        return [
            Start(op.job.key, op.task.name, op.placement) for op in self._ops if not op.eviction
        ]

    def allocate(self, job: Job, task: Task, placement: Placement) -> None:
        """Record a placement the engine already made (``engine.place`` took the resources)."""
        self._check_open()
        claimed = claimed_gpus(self.session, placement) if task.counts_claimed_gpus else None
        self._ops.append(_Op(job, task, placement, task.since, job.started, None, claimed))
        if claimed is not None:
            self.session.claim(job, claimed)
        task.placement = placement
        task.since = self.session.now
        if job.started is None:
            job.started = self.session.now
        self.session.account(job, task.resources)

    def evict(self, job: Job, task: Task, eviction: Eviction) -> None:
        """Take a running task off its node (its resources are free for what follows)."""
        self._check_open()
        placement = task.placement
        if placement is None:
            raise ValueError(f"evict {job.key}/{task.name}: the task does not run")
        self._ops.append(_Op(job, task, placement, task.since, job.started, eviction))
        self.session.engine.release(placement)
        task.placement = None
        task.since = None
        if not job.is_running:
            job.started = None
        self.session.account(job, task.resources, sign=-1)

    def commit(self) -> None:
        """The changes become the cycle's decisions."""
        self._check_open()
        self._open = False
        session = self.session
        decisions = session.decisions
        freed = session.freed_nodes
        for op in self._ops:  # evictions first: a start may use the room they free
            if op.eviction is not None:
                decisions.evicted.append(op.eviction)
                freed.add(op.placement.node)
                # A victim holds its resources until its stop is confirmed: for the quotas of
                # what else starts in this cycle it still counts (the statement's own start
                # used its room and quota: that start waits for the stop, ``pipelined``).
                session.claim(op.job, op.task.resources)
        # A start that needed victims (room or quota: they are evicted in its statement), or
        # that is on a node where tasks were evicted in this cycle, is pipelined: it waits
        # for the victims' stops where stops take time.
        evicts = any(op.eviction is not None for op in self._ops)
        for op in self._ops:
            if op.eviction is None:
                decisions.started.append(Start(op.job.key, op.task.name, op.placement))
                if evicts or op.placement.node in freed:
                    decisions.pipelined.add(op.job.key)

    def discard(self) -> None:
        """Undo every change, last first: placements given back, victims held again."""
        self._check_open()
        self._open = False
        for op in reversed(self._ops):
            if op.eviction is None:
                self.session.engine.release(op.placement)
                op.task.placement = None
                self.session.account(op.job, op.task.resources, sign=-1)
                if op.claimed is not None:
                    self.session.claim(op.job, op.claimed, sign=-1)
            else:
                self.session.engine.hold(op.placement)
                op.task.placement = op.placement
                self.session.account(op.job, op.task.resources)
            op.task.since = op.since
            op.job.started = op.job_started
        self._ops.clear()

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError("the statement was already committed or discarded")


def claimed_gpus(session: SessionLedger, placement: Placement) -> Resources:
    """The whole GPUs a placed task's DRA claims were given, in milli (the engine knows which
    devices the placement took; an engine without claims gives none)."""
    claimed = getattr(session.engine, "claimed_gpus", None)
    count = int(claimed(placement)) if claimed is not None else 0
    return Resources(gpu_milli=1000 * count)


def claims_over_quota(statement: Statement, job: Job, tasks: list[Task]) -> str | None:
    """After ``statement`` placed ``tasks`` of ``job``: when the GPUs their DRA claims were
    given break a quota (they are known only once the devices are chosen; the quotas were
    checked without them before), the statement is discarded and the words say which quota;
    None when every quota holds."""
    if not any(t.counts_claimed_gpus for t in tasks):
        return None
    session = statement.session
    if session.quota_problem(job, Resources()) is None:
        return None
    want = Resources()
    for op in statement._ops:
        if op.eviction is None and op.job is job:
            want = want + op.task.resources + (op.claimed or Resources())
    statement.discard()
    return session.quota_problem(job, want) or "its claims' GPUs break a quota"


def evicted_jobs(session: SessionLedger) -> set[str]:
    """Jobs with a task evicted this cycle (committed): no later action of the cycle starts
    them again, or the room their eviction freed would not go to their preemptor."""
    return {e.job for e in session.decisions.evicted}


def touched_jobs(session: SessionLedger) -> set[str]:
    """Jobs started or evicted this cycle: neither preemptors nor victims again this cycle."""
    return evicted_jobs(session) | {s.job for s in session.decisions.started}
