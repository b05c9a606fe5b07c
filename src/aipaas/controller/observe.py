"""Step 2 of a controller cycle: what the backend's answers mean for the task records, as
values.

``asked`` lists the attempts the cycle asked about (started ones, and those asked to stop);
``observe`` turns the backend's answers into lifecycle transitions (controller/lifecycle.py)
and the events to record, in the order they happen to each record (an attempt whose stop is
confirmed and that still counted as running gets its end next). The controller carries them
out: it stores each record, queues the stops, asks for the starts and writes the events.

The at-most-once rules read here: an unreachable backend concludes nothing; an attempt asked
to stop is free only once an answer confirms it (``stop_confirmed``); one still running is
asked again only if this process has not asked it yet (a restarted controller asks once more).

Pure but for ``unknown_once`` (part of the controller's memory, controller/memory.py), which
it updates. Who calls it: controller/cycle.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from aipaas.api.job import TaskPhase
from aipaas.backends.base import TaskState, TaskStatus
from aipaas.controller.lifecycle import Event, Facts, Transition, apply, leaves_as_is
from aipaas.controller.work import ACTIVE, JobWork
from aipaas.store import TaskRecord

#: the lifecycle event of each backend answer (UNREACHABLE concludes nothing: never looked up)
EVENTS: Mapping[TaskState, Event] = {
    TaskState.RUNNING: Event.RUNNING,
    TaskState.SUCCEEDED: Event.SUCCEEDED,
    TaskState.FAILED: Event.FAILED,
    TaskState.LOST: Event.LOST,
    TaskState.UNKNOWN: Event.UNKNOWN,
}


@dataclass(frozen=True)
class Observed:
    """One change to carry out: the transition of one record of ``item``, and the event to
    write with it (reason, message, warning), if any."""

    item: JobWork
    moved: Transition
    event: tuple[str, str, bool] | None = None
    #: the attempt's stop is confirmed: this process no longer counts it as asked
    stop_confirmed: bool = False


def asked(work: Sequence[JobWork]) -> list[tuple[JobWork, TaskRecord]]:
    """The attempts to ask the backend about: started and running, or asked to stop."""
    return [
        (item, r)
        for item in work
        for r in item.records
        if r.request_id and (r.phase in ACTIVE or r.stopping)
    ]


def observe(
    asking: Sequence[tuple[JobWork, TaskRecord]],
    answers: Mapping[str, TaskStatus],
    now: datetime,
    *,
    unknown_once: set[str],
    asked_to_stop: Callable[[str], bool],
) -> list[Observed]:
    """What each answer changes (``asked_to_stop(rid)``: this process already asked that
    attempt to stop, or holds its stop while it drains)."""
    out: list[Observed] = []
    for item, record in asking:
        rid = record.request_id or ""
        answer = answers.get(rid) or TaskStatus(rid, TaskState.UNREACHABLE)
        if answer.state is TaskState.UNREACHABLE:
            continue  # nothing is known: nothing is concluded
        if not record.stopping and leaves_as_is(record, EVENTS[answer.state]):
            continue  # thousands of running tasks still run: nothing to build for them
        if record.stopping:
            if not stop_confirmed(answer, record, unknown_once):
                if answer.state is TaskState.RUNNING and not asked_to_stop(rid):
                    out.append(Observed(item, apply(record, Event.STILL_RUNS, Facts(now))))
                continue
            confirmed = apply(record, Event.STOP_CONFIRMED, Facts(now))
            out.append(Observed(item, confirmed, stop_confirmed=True))
            record = confirmed.record
            if record.phase not in ACTIVE:
                continue
        out.append(_answered(item, record, answer, now))
    return out


def _answered(item: JobWork, record: TaskRecord, answer: TaskStatus, now: datetime) -> Observed:
    event = EVENTS[answer.state]
    facts = Facts(
        now,
        answer.message,
        exit_code=answer.exit_code,
        started_at=answer.started_at,
        finished_at=answer.finished_at,
    )
    said: tuple[str, str, bool] | None = None
    if event is Event.UNKNOWN and record.phase == TaskPhase.RUNNING.value:
        facts = Facts(now, "the backend does not know the task")
        said = ("TaskLost", f"{record.name}: the backend does not know it", True)
    elif event is Event.SUCCEEDED:
        said = ("TaskSucceeded", f"{record.name} exited with code 0", False)
    elif event in (Event.FAILED, Event.LOST):
        said = ("TaskFailed", f"{record.name} {event.value.lower()}: {answer.message}", True)
    return Observed(item, apply(record, event, facts), said)


def stop_confirmed(answer: TaskStatus, record: TaskRecord, unknown_once: set[str]) -> bool:
    """Whether an answer confirms that an attempt asked to stop no longer runs. An end
    (exit code, lost) confirms at once. "Unknown" (the backend has no record of it) confirms
    only where the backend is authoritative that the attempt never ran: one never seen running
    (no ``started_at``), said in two answers in a row (``unknown_once`` remembers the first),
    so one wrong answer never frees what may still run. For an attempt once seen running it
    confirms nothing: the backend's own record said it ran."""
    rid = answer.request_id
    if answer.state is TaskState.UNKNOWN:
        if record.started_at is not None:
            unknown_once.discard(rid)
            return False
        if rid not in unknown_once:
            unknown_once.add(rid)
            return False
    elif answer.state in (TaskState.RUNNING, TaskState.UNREACHABLE):
        unknown_once.discard(rid)
        return False
    unknown_once.discard(rid)
    return True
