"""A Statement: changes an action proposes over the snapshot, committed whole or discarded.

As Volcano's Statement: an action evicts victims and places its preemptor inside one
statement; if the preemptor cannot start after all, ``discard`` gives every victim its
placement back and nothing was evicted. Only ``commit`` makes the changes decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.model import Eviction, Job, Start, Task
from aipaas.scheduler.framework.types import Placement

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session


@dataclass(slots=True)
class _Op:
    job: Job
    task: Task
    placement: Placement
    since: float | None
    job_started: float | None
    eviction: Eviction | None  # None: a start


class Statement:
    """Open on a session; every change is applied to the session at once (so later checks
    see it) and remembered, to be undone by ``discard`` or made decisions by ``commit``."""

    def __init__(self, session: Session) -> None:
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
        self._ops.append(_Op(job, task, placement, task.since, job.started, None))
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
        decisions = self.session.decisions
        for op in self._ops:
            if op.eviction is None:
                decisions.started.append(Start(op.job.key, op.task.name, op.placement))
            else:
                decisions.evicted.append(op.eviction)

    def discard(self) -> None:
        """Undo every change, last first: placements given back, victims held again."""
        self._check_open()
        self._open = False
        for op in reversed(self._ops):
            if op.eviction is None:
                self.session.engine.release(op.placement)
                op.task.placement = None
                self.session.account(op.job, op.task.resources, sign=-1)
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


def evicted_jobs(session: Session) -> set[str]:
    """Jobs with a task evicted this cycle (committed): no later action of the cycle starts
    them again, or the room their eviction freed would not go to their preemptor."""
    return {e.job for e in session.decisions.evicted}


def touched_jobs(session: Session) -> set[str]:
    """Jobs started or evicted this cycle: neither preemptors nor victims again this cycle."""
    return evicted_jobs(session) | {s.job for s in session.decisions.started}
