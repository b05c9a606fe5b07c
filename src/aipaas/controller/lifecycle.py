"""The task lifecycle, as one transition table: (state, stopping) x event -> the new record
and its effects.

A task record's state is its phase, with Pending split in two: ``WaitingRestart`` (Pending on
its node until ``restart_after``: a backoff, a gang restart) and ``Pending`` (to be placed by
the scheduler). ``stopping`` says an attempt was asked to stop and the backend has not yet
confirmed it no longer runs: such a record keeps its resources, and no replacement starts.

Every change of a record's phase, node or ``stopping`` in the controller goes through
``apply``: it finds the row for the record's state and the event, and returns the new record
with the effects the caller carries out (``Effect``: ask the backend to stop the attempt, ask
it to start one, the node given back). A combination that has no row is a bug and raises
``IllegalTransition``: nothing changes silently. ``TABLE`` is data; ``docs/architecture.md``
shows it, and tests/unit/controller/test_task_lifecycle_table.py walks every row.

Pure: no store, no backend. Who calls it: controller/cycle.py (observe, advance, finish, the
starts), admission.py, batch_cycle.py, device_taint_eviction.py, gang_restart.py, plan.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from aipaas.api.job import TaskPhase
from aipaas.controller.launch import request_id
from aipaas.controller.placement import Slot
from aipaas.store import TaskRecord


class State(StrEnum):
    """A record's phase as the lifecycle tells them apart."""

    PENDING = "Pending"
    WAITING_RESTART = "WaitingRestart"
    STARTING = "Starting"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    LOST = "Lost"
    CANCELLED = "Cancelled"


class Event(StrEnum):
    """What happens to a task."""

    #: the backend runs the attempt
    RUNNING = "Running"
    #: the attempt ended with exit code 0
    SUCCEEDED = "Succeeded"
    #: the attempt ended with another exit code
    FAILED = "Failed"
    #: the backend lost the attempt (no exit code): what is left of it is stopped
    LOST = "Lost"
    #: the backend has no record of the attempt
    UNKNOWN = "Unknown"
    #: an answer confirms that an attempt asked to stop no longer runs
    STOP_CONFIRMED = "StopConfirmed"
    #: an attempt asked to stop still runs
    STILL_RUNS = "StillRuns"
    #: the controller no longer counts on the attempt (lost, cancelled, a start that failed)
    GIVEN_UP = "GivenUp"
    #: the job ended: a task that never ran to its end is closed
    CLOSED = "Closed"
    #: a preemptor, a reclaim or a device taint takes the task's resources
    EVICTED = "Evicted"
    #: the scheduler placed the task on a slot
    PLACED = "Placed"
    #: its own restart policy restarts it after a backoff, on its node
    RESTART_LATER = "RestartLater"
    #: its gang restarts after a backoff, every placed task on its node
    GANG_RESTART = "GangRestart"
    #: its backoff ended and its node is ready
    RESTART_DUE = "RestartDue"
    #: a restart that waited on its node can no longer be held there
    HOLD_LOST = "HoldLost"
    #: its devices' binding failed (a failure condition, the timeout)
    BINDING_FAILED = "BindingFailed"


class Effect(StrEnum):
    """What the caller does besides storing the new record."""

    #: ask the backend to stop the attempt (sent after a fenced write)
    ASK_STOP = "AskStop"
    #: ask the backend to start the attempt (idempotent by its request id)
    START = "Start"


@dataclass(frozen=True, slots=True)
class Stop:
    """An attempt to stop: its request id, and how long its SIGTERM waits (an evicted
    service replica drains first; 0 for every other stop)."""

    request_id: str
    drain_seconds: float = 0.0


class IllegalTransition(ValueError):
    """An event that the task's state has no row for."""


@dataclass(frozen=True)
class Facts:
    """What an event brings: the moment, and what the backend or the caller says."""

    now: datetime
    message: str = ""
    exit_code: int | None = None
    #: when the backend says the attempt really ran (Slurm's accounting), if it knows
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: GIVEN_UP: the phase it ends in (Lost or Cancelled)
    phase: TaskPhase = TaskPhase.LOST
    #: RESTART_LATER, GANG_RESTART: when it may start again
    restart_after: datetime | None = None
    #: PLACED: where
    slot: Slot | None = None


@dataclass(frozen=True)
class Transition:
    record: TaskRecord
    effects: frozenset[Effect] = frozenset()
    #: False when the record is the very one the event found (nothing to write)
    changed: bool = True

    def stop(self, drain_seconds: float = 0.0) -> Stop | None:
        """The stop this transition asks, if it asks one."""
        if Effect.ASK_STOP not in self.effects or not self.record.request_id:
            return None
        return Stop(self.record.request_id, drain_seconds)


Change = Callable[[TaskRecord, Facts], TaskRecord]


@dataclass(frozen=True)
class Row:
    """From ``states`` (with ``stopping`` as given, None: either), on ``event``: the record
    ``change`` makes, in state ``to`` (None: the state it was in), with ``effects``."""

    states: frozenset[State]
    stopping: bool | None
    event: Event
    to: State | None
    effects: frozenset[Effect]
    change: Change = field(compare=False)
    why: str = ""


def state_of(record: TaskRecord) -> State:
    if record.phase == TaskPhase.PENDING.value:
        waiting = record.restart_after is not None and record.node is not None
        return State.WAITING_RESTART if waiting else State.PENDING
    return State(record.phase)


# --- the changes ------------------------------------------------------------------------


def _same(record: TaskRecord, facts: Facts) -> TaskRecord:
    return record


def _runs(record: TaskRecord, facts: Facts) -> TaskRecord:
    started = facts.started_at or facts.now  # the backend's own time, if it knows
    return record.with_(phase=TaskPhase.RUNNING.value, started_at=started, message="")


def _ended(phase: TaskPhase) -> Change:
    def change(record: TaskRecord, facts: Facts) -> TaskRecord:
        return record.with_(
            phase=phase.value,
            exit_code=facts.exit_code,
            # the times the backend says it really ran replace the cycle's observations:
            # they are what the usage ledger charges
            started_at=facts.started_at or record.started_at,
            finished_at=facts.finished_at or facts.now,
            message=facts.message,
        )

    return change


def _given_up_as(phase: TaskPhase | None) -> Change:
    """Ended with ``phase`` (None: the one the facts give), and ``stopping`` until the backend
    confirms when the attempt was started."""

    def change(record: TaskRecord, facts: Facts) -> TaskRecord:
        return record.with_(
            phase=(phase or facts.phase).value,
            message=facts.message,
            finished_at=record.finished_at or facts.now,
            stopping=bool(record.request_id) or record.stopping,
        )

    return change


def _lost(record: TaskRecord, facts: Facts) -> TaskRecord:
    return _given_up_as(TaskPhase.LOST)(_ended(TaskPhase.LOST)(record, facts), facts)


def _told_why(record: TaskRecord, facts: Facts) -> TaskRecord:
    # why it waits (Slurm's own queue)
    return record.with_(message=facts.message) if facts.message != record.message else record


def _confirmed(record: TaskRecord, facts: Facts) -> TaskRecord:
    return record.with_(stopping=False)


def _freed(record: TaskRecord, facts: Facts | None = None) -> TaskRecord:
    return record.with_(node=None, node_index=None, gpus=(), gpu_milli=0)


def _confirmed_and_freed(record: TaskRecord, facts: Facts) -> TaskRecord:
    return _freed(record.with_(stopping=False))


def _closed(record: TaskRecord, facts: Facts) -> TaskRecord:
    return record.with_(
        phase=TaskPhase.CANCELLED.value,
        finished_at=facts.now,
        restart_after=None,
        message=facts.message,
    )


def _evicted_running(record: TaskRecord, facts: Facts) -> TaskRecord:
    # not an attempt the task spent: ``evictions`` keeps it out of its backoffLimit
    return record.with_(
        phase=TaskPhase.PENDING.value,
        message=facts.message,
        restart_after=None,
        exit_code=None,
        stopping=True,
        finished_at=record.finished_at or facts.now,
        evictions=record.evictions + 1,
    )


def _evicted_waiting(record: TaskRecord, facts: Facts) -> TaskRecord:
    return _freed(
        record.with_(
            phase=TaskPhase.PENDING.value,
            message=facts.message,
            restart_after=None,
            exit_code=None,
        )
    )


def _placed(record: TaskRecord, facts: Facts) -> TaskRecord:
    slot = facts.slot
    if slot is None:
        raise IllegalTransition(f"task {record.name}: placed without a slot")
    if record.request_id is not None:  # it ran before: a new attempt
        record = _new_attempt(record)
    placed = record.with_(
        node=slot.node,
        node_index=slot.node_index,
        gpus=slot.gpus,
        gpu_milli=slot.gpu_milli,
        phase=TaskPhase.STARTING.value,
    )
    return placed.with_(request_id=request_id(placed))


def _new_attempt(record: TaskRecord) -> TaskRecord:
    return record.with_(
        attempt=record.attempt + 1,
        restart_after=None,
        exit_code=None,
        message="",
        started_at=None,  # the new attempt's own times (the usage ledger)
        finished_at=None,
    )


def _restart_later(record: TaskRecord, facts: Facts) -> TaskRecord:
    return record.with_(phase=TaskPhase.PENDING.value, restart_after=facts.restart_after)


def _gang_restart(record: TaskRecord, facts: Facts) -> TaskRecord:
    running = record.phase in _ACTIVE and record.request_id is not None
    return record.with_(
        phase=TaskPhase.PENDING.value,
        restart_after=facts.restart_after,
        message=facts.message,
        finished_at=record.finished_at or facts.now,
        stopping=record.stopping or running,
        # not an attempt the task spent: its own backoffLimit counts without it
        evictions=record.evictions + 1,
    )


def _restarted(record: TaskRecord, facts: Facts) -> TaskRecord:
    restarted = _new_attempt(record).with_(phase=TaskPhase.STARTING.value)
    return restarted.with_(request_id=request_id(restarted))


def _binding_failed(record: TaskRecord, facts: Facts) -> TaskRecord:
    return _freed(record.with_(phase=TaskPhase.PENDING.value, message=facts.message))


# --- the table --------------------------------------------------------------------------

_ACTIVE = (TaskPhase.STARTING.value, TaskPhase.RUNNING.value)
_STOP = frozenset({Effect.ASK_STOP})
_START = frozenset({Effect.START})
_NONE: frozenset[Effect] = frozenset()
ACTIVE = frozenset({State.STARTING, State.RUNNING})
WAITING = frozenset({State.PENDING, State.WAITING_RESTART})
ENDED = frozenset({State.SUCCEEDED, State.FAILED, State.LOST, State.CANCELLED})
EVERY = frozenset(State)

S = State
E = Event
TABLE: tuple[Row, ...] = (
    # observe: what the backend says of an attempt not asked to stop
    Row(frozenset({S.STARTING}), False, E.RUNNING, S.RUNNING, _NONE, _runs, "it started"),
    Row(frozenset({S.RUNNING}), False, E.RUNNING, S.RUNNING, _NONE, _same, "it still runs"),
    Row(ACTIVE, False, E.SUCCEEDED, S.SUCCEEDED, _NONE, _ended(TaskPhase.SUCCEEDED), "exit 0"),
    Row(ACTIVE, False, E.FAILED, S.FAILED, _NONE, _ended(TaskPhase.FAILED), "another code"),
    Row(ACTIVE, False, E.LOST, S.LOST, _STOP, _lost, "no exit code: what is left is stopped"),
    Row(
        frozenset({S.STARTING}), False, E.UNKNOWN, S.STARTING, _START, _told_why,
        "the start was lost (a crash): asked again, idempotent by request id",
    ),
    Row(
        frozenset({S.RUNNING}), False, E.UNKNOWN, S.LOST, _STOP, _given_up_as(TaskPhase.LOST),
        "the backend does not know an attempt it ran: given up, stopped",
    ),
    # observe: an attempt asked to stop
    Row(
        frozenset({S.PENDING}), True, E.STOP_CONFIRMED, S.PENDING, _NONE, _confirmed_and_freed,
        "an evicted task stopped: its node is free, it is placed again later",
    ),
    Row(
        EVERY - {S.PENDING}, True, E.STOP_CONFIRMED, None, _NONE, _confirmed,
        "it no longer runs: its resources are free",
    ),
    Row(EVERY, True, E.STILL_RUNS, None, _STOP, _same, "asked again if this process has not"),
    # the controller's decisions
    Row(EVERY, None, E.GIVEN_UP, None, _STOP, _given_up_as(None), "stopped if it was started"),
    Row(ACTIVE | WAITING, None, E.CLOSED, S.CANCELLED, _NONE, _closed, "its job ended"),
    Row(
        ACTIVE, None, E.EVICTED, S.PENDING, _STOP, _evicted_running,
        "stopped; keeps its resources until the stop is confirmed",
    ),
    Row(WAITING, None, E.EVICTED, S.PENDING, _NONE, _evicted_waiting, "nothing runs: freed"),
    Row(frozenset({S.PENDING}), False, E.PLACED, S.STARTING, _START, _placed, "a new attempt"),
    Row(
        frozenset({S.FAILED, S.LOST}), None, E.RESTART_LATER, S.WAITING_RESTART, _NONE,
        _restart_later, "its own restart policy, after a backoff",
    ),
    Row(
        ACTIVE, None, E.GANG_RESTART, S.WAITING_RESTART, _STOP, _gang_restart,
        "stopped; the gang starts again together",
    ),
    Row(
        (ENDED | {S.WAITING_RESTART}), None, E.GANG_RESTART, S.WAITING_RESTART, _NONE,
        _gang_restart, "waits for the gang",
    ),
    Row(
        frozenset({S.WAITING_RESTART}), False, E.RESTART_DUE, S.STARTING, _START, _restarted,
        "a new attempt on its node",
    ),
    Row(
        WAITING, None, E.HOLD_LOST, S.PENDING, _NONE, _freed,
        "placed again by the scheduler, within the quotas",
    ),
    Row(
        frozenset({S.STARTING}), False, E.BINDING_FAILED, S.PENDING, _NONE, _binding_failed,
        "its devices are freed, it is placed again",
    ),
)  # fmt: skip

_INDEX: dict[tuple[State, bool, Event], Row] = {}
for _row in TABLE:
    for _state in _row.states:
        for _stopping in (True, False) if _row.stopping is None else (_row.stopping,):
            key = (_state, _stopping, _row.event)
            if key in _INDEX:
                raise AssertionError(f"two rows for {key}")
            _INDEX[key] = _row


def row_for(record: TaskRecord, event: Event) -> Row:
    found = _INDEX.get((state_of(record), record.stopping, event))
    if found is None:
        stopping = ", stopping" if record.stopping else ""
        raise IllegalTransition(
            f"task {record.name} ({state_of(record).value}{stopping}): no transition on {event}"
        )
    return found


def leaves_as_is(record: TaskRecord, event: Event) -> bool:
    """``event`` changes nothing of ``record`` and has no effect (a running task said to
    run): the observe step skips it without building its facts."""
    row = _INDEX.get((state_of(record), record.stopping, event))
    return row is not None and row.change is _same and not row.effects


def apply(record: TaskRecord, event: Event, facts: Facts) -> Transition:
    """The record after ``event``, with the effects to carry out. ``ASK_STOP`` is given only
    for an attempt that was started (has a request id)."""
    row = row_for(record, event)
    changed = row.change(record, facts)
    effects = row.effects if record.request_id else row.effects - _STOP
    return Transition(changed, effects, changed is not record)
