"""Step 3 of a controller cycle: per job, cancellation, the time limit, restarts with backoff
(a task's own, or the whole gang's: controller/gang_restart.py), failure and completion, as
values.

``advance`` reads one job's records and returns what becomes of them (``Advanced``): the
lifecycle transitions in order (controller/lifecycle.py), the events, the gang's restart
count, and how the job ends if it does. The controller carries it out: it stores the records,
queues the stops, makes the restarted tasks' records durable before it asks the backend to
start them, and ends the job (``Controller.finish``: every attempt still running is stopped
first, and the job ends only once the backend confirms).

Pure. Who calls it: controller/cycle.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from aipaas.api.job import CANCEL_ANNOTATION, JobPhase, TaskPhase
from aipaas.controller import gang_restart
from aipaas.controller.launch import task_spec
from aipaas.controller.lifecycle import Event, Facts, Transition, apply
from aipaas.controller.work import ACTIVE, JobWork
from aipaas.metering.usage import aware
from aipaas.store import TaskRecord


@dataclass(frozen=True)
class Backoff:
    """Restart delays: ``seconds`` doubling with each attempt, at most ``max_seconds``."""

    seconds: float = 1.0
    max_seconds: float = 60.0

    def delay(self, attempts: int) -> float:
        return min(self.seconds * 2.0**attempts, self.max_seconds)


@dataclass
class Advanced:
    """What step 3 decided for one job, in the order to carry it out."""

    #: the records' transitions, in order (a gang restart's stops among their effects)
    moves: list[Transition] = field(default_factory=list)
    #: events to write (reason, message, warning)
    events: list[tuple[str, str, bool]] = field(default_factory=list)
    #: the gang's restarts after this step (None: unchanged)
    restarts: int | None = None
    #: the job ends: (phase, reason, message)
    end: tuple[JobPhase, str, str] | None = None
    #: restarted gang members start together, once all are Starting
    together: bool = False


class _Records:
    """The job's records as the step changes them (each move recorded)."""

    def __init__(self, records: list[TaskRecord], out: Advanced) -> None:
        self.records = list(records)
        self.out = out

    def move(self, record: TaskRecord, event: Event, facts: Facts) -> TaskRecord:
        moved = apply(record, event, facts)
        self.set(moved)
        return moved.record

    def set(self, moved: Transition) -> None:
        self.out.moves.append(moved)
        name = moved.record.name
        self.records = [moved.record if r.name == name else r for r in self.records]


def advance(
    item: JobWork, now: datetime, backoff: Backoff, node_ready: Callable[[str], bool]
) -> Advanced:
    """Cancel, restart with backoff, fail or complete one job (``node_ready``: whether a node
    takes a restart now)."""
    out = Advanced()
    job = item.job
    if CANCEL_ANNOTATION in job.metadata.annotations:
        out.end = (JobPhase.CANCELLED, "Cancelled", "the job was cancelled")
        return out
    if not item.records:
        return out  # not admitted yet: nothing runs, nothing to restart or end
    over = _past_time_limit(item.records, job.spec.time_limit_seconds, now)
    if over is not None:
        out.end = (JobPhase.FAILED, "TimeLimit", over)
        return out
    records = _Records(item.records, out)
    if job.spec.restarts_as_gang:
        out.together = True
        if not _restart_gang(item, records, now, backoff):
            return out
    for record in list(records.records):
        if record.phase in (TaskPhase.FAILED.value, TaskPhase.LOST.value):
            spec = task_spec(job, record.group_name)
            # Attempts ended by an eviction do not count against the backoff limit.
            restarts = record.attempt - record.evictions
            if spec.restart_policy == "OnFailure" and restarts < spec.backoff_limit:
                delay = backoff.delay(record.attempt)
                later = Facts(now, restart_after=now + timedelta(seconds=delay))
                records.move(record, Event.RESTART_LATER, later)
                message = (
                    f"{record.name} restarts in {delay:g}s "
                    f"(restart {restarts + 1} of {spec.backoff_limit})"
                )
                out.events.append(("TaskRestarting", message, False))
            else:
                out.end = (JobPhase.FAILED, "TaskFailed", _failure(record))
                return out
        elif (
            record.phase == TaskPhase.PENDING.value
            and record.restart_after is not None
            and record.restart_after <= now
            and record.node is not None
            and not record.stopping  # the attempt before must be confirmed stopped
            and node_ready(record.node)
        ):
            records.move(record, Event.RESTART_DUE, Facts(now))
    ended = records.records
    if ended and all(r.phase == TaskPhase.SUCCEEDED.value for r in ended):
        out.end = (JobPhase.SUCCEEDED, "Succeeded", f"all {len(ended)} tasks succeeded")
    return out


def _failure(record: TaskRecord) -> str:
    code = f" with exit code {record.exit_code}" if record.exit_code is not None else ""
    restarts = f" after {record.attempt} restarts" if record.attempt else ""
    return f"{record.name} {record.phase.lower()}{code}{restarts}"


def _restart_gang(item: JobWork, records: _Records, now: datetime, backoff: Backoff) -> bool:
    """A job with ``spec.restartPolicy: OnFailure``: a task failed past its own policy
    restarts the whole gang, or fails the job once the gang's backoffLimit is spent
    (controller/gang_restart.py); False when the job ends here."""
    job, out = item.job, records.out
    failed = gang_restart.failed_past_own_policy(job, records.records)
    restarts = item.restarts
    if restarts is None:
        restarts = (job.status.restarts if job.status is not None else None) or 0
    if failed and restarts >= job.spec.gang_backoff_limit:
        why = gang_restart.gang_failure(failed, restarts, job.spec.gang_backoff_limit)
        out.end = (JobPhase.FAILED, "TaskFailed", why)
        return False
    if failed:
        plan = gang_restart.restart(
            records.records,
            failed,
            restarts=restarts,
            now=now,
            backoff_seconds=backoff.seconds,
            backoff_max_seconds=backoff.max_seconds,
        )
        for moved in plan.moves:
            records.set(moved)
        out.restarts = plan.restarts
        out.events.append(("GangRestarting", plan.message, True))
    for record in gang_restart.held(records.records, now, backoff.seconds):
        # only its restart time moves: the same state (lifecycle.py has no row for it)
        records.set(Transition(record))
    return True


def _past_time_limit(records: list[TaskRecord], limit: float | None, now: datetime) -> str | None:
    """Why a job running longer than its ``timeLimit`` (since the first start of its current
    run) ends, or None."""
    if limit is None:
        return None
    # Cancelled records with a start: this job is being stopped for its limit (the end is
    # carried out again each cycle until every stop is confirmed).
    counted = (*ACTIVE, TaskPhase.CANCELLED.value)
    starts = [r.started_at for r in records if r.phase in counted and r.started_at]
    if not starts:
        return None
    ran = (now - min(aware(s) for s in starts)).total_seconds()
    return f"reached its time limit of {limit}s" if ran >= limit else None
