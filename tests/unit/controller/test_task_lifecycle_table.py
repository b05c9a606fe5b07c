"""The task lifecycle table (controller/lifecycle.py), walked row by row: each row's record,
built in every state the row names, goes where the row says with the effects it says, and
the at-most-once invariants hold on every row (an attempt asked to stop is marked
``stopping``; a stopping attempt is never started again nor forgotten unless its stop is
confirmed; a new attempt only with a start). A combination without a row raises."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aipaas.api.job import TaskPhase
from aipaas.controller.lifecycle import (
    TABLE,
    Effect,
    Event,
    Facts,
    IllegalTransition,
    Row,
    State,
    Stop,
    apply,
    row_for,
    state_of,
)
from aipaas.controller.placement import Slot
from aipaas.store import TaskRecord

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
RID = "uid.w-0.0"
SLOT = Slot("w-0", "n2", 1, (3,), 1000)


def record_in(state: State, stopping: bool) -> TaskRecord:
    """A record in ``state``: started ones carry a request id and a node; a Pending one is
    fresh unless it is stopping (an evicted attempt not yet confirmed stopped)."""
    base = TaskRecord("uid", "acme", "j", "w-0", "w", 0, 0)
    if state is State.PENDING:
        if not stopping:
            return base
        return base.with_(node="n1", node_index=0, request_id=RID, stopping=True, evictions=1)
    started = base.with_(node="n1", node_index=0, request_id=RID, started_at=NOW, stopping=stopping)
    if state is State.WAITING_RESTART:
        return started.with_(phase="Pending", restart_after=NOW + timedelta(seconds=5))
    if state in (State.STARTING, State.RUNNING):
        return started.with_(phase=state.value, started_at=None if state is State.STARTING else NOW)
    return started.with_(phase=state.value, finished_at=NOW, exit_code=1)


def facts_for(event: Event) -> Facts:
    later = NOW + timedelta(seconds=10)
    if event is Event.GIVEN_UP:
        return Facts(NOW, "given up", phase=TaskPhase.CANCELLED)
    if event is Event.PLACED:
        return Facts(NOW, slot=SLOT)
    if event in (Event.RESTART_LATER, Event.GANG_RESTART):
        return Facts(NOW, "restarts", restart_after=later)
    if event is Event.SUCCEEDED:
        return Facts(NOW, "", exit_code=0, finished_at=later)
    return Facts(NOW, event.value, exit_code=2 if event is Event.FAILED else None)


def expected_state(row: Row, before: State, facts: Facts) -> State:
    if row.event is Event.GIVEN_UP:
        return State(facts.phase.value)
    return row.to or before


def cases() -> list[tuple[Row, State, bool]]:
    out = []
    for row in TABLE:
        for state in sorted(row.states):
            for stopping in (False, True) if row.stopping is None else (row.stopping,):
                out.append((row, state, stopping))
    return out


@pytest.mark.parametrize(
    ("row", "state", "stopping"),
    cases(),
    ids=[f"{s.value}{'-stopping' if t else ''}-{r.event.value}" for r, s, t in cases()],
)
def test_each_row_goes_where_it_says_with_its_effects(
    row: Row, state: State, stopping: bool
) -> None:
    record = record_in(state, stopping)
    assert state_of(record) is state and record.stopping is stopping
    assert row_for(record, row.event) is row
    facts = facts_for(row.event)
    moved = apply(record, row.event, facts)
    after = moved.record
    assert state_of(after) is expected_state(row, state, facts), row.why
    started = record.request_id is not None
    assert moved.effects == (row.effects if started else row.effects - {Effect.ASK_STOP})
    # an attempt asked to stop is marked stopping until the backend confirms
    if Effect.ASK_STOP in moved.effects:
        assert after.stopping and moved.stop() == Stop(RID, 0.0)
    # only a confirmation ends ``stopping``; nothing is started while an attempt stops
    if row.event is Event.STOP_CONFIRMED:
        assert not after.stopping
    elif stopping:
        assert after.stopping
        assert Effect.START not in moved.effects
    # a start has a Starting record with its request id; a new id means a new attempt
    if Effect.START in moved.effects:
        assert after.phase == TaskPhase.STARTING.value and after.request_id
    if after.request_id != record.request_id:
        assert Effect.START in moved.effects and after.request_id is not None
        assert after.attempt == record.attempt + (record.request_id is not None)
        assert after.started_at is None and after.exit_code is None


def test_every_row_is_walked() -> None:
    assert {id(row) for row, _, _ in cases()} == {id(row) for row in TABLE}


def test_a_combination_without_a_row_raises() -> None:
    legal = {(state, stopping, row.event) for row, state, stopping in cases()}
    illegal = [
        (state, stopping, event)
        for state in State
        for stopping in (False, True)
        for event in Event
        if (state, stopping, event) not in legal
    ]
    assert (State.SUCCEEDED, False, Event.RUNNING) in illegal
    assert (State.RUNNING, True, Event.PLACED) in illegal  # never a replacement while stopping
    for state, stopping, event in illegal:
        with pytest.raises(IllegalTransition, match=event.value):
            apply(record_in(state, stopping), event, facts_for(event))


def test_an_eviction_of_a_running_attempt_keeps_its_resources_and_counts_apart() -> None:
    running = record_in(State.RUNNING, False)
    moved = apply(running, Event.EVICTED, Facts(NOW, "Preempted by acme/urgent: room"))
    assert moved.record.node == "n1" and moved.record.gpus == running.gpus
    assert moved.record.evictions == running.evictions + 1
    assert moved.record.attempt == running.attempt  # not an attempt it spent
    assert moved.stop(2.5) == Stop(RID, 2.5)  # a replica drains first


def test_a_confirmed_stop_of_an_evicted_task_frees_its_node_but_not_a_waiting_restart() -> None:
    evicted = record_in(State.PENDING, True)
    freed = apply(evicted, Event.STOP_CONFIRMED, Facts(NOW)).record
    assert freed.node is None and not freed.stopping
    waiting = record_in(State.WAITING_RESTART, True)
    kept = apply(waiting, Event.STOP_CONFIRMED, Facts(NOW)).record
    assert kept.node == "n1" and kept.restart_after == waiting.restart_after


def test_a_placed_task_that_ran_before_starts_a_new_attempt_on_its_slot() -> None:
    evicted = apply(record_in(State.PENDING, True), Event.STOP_CONFIRMED, Facts(NOW)).record
    placed = apply(evicted, Event.PLACED, Facts(NOW, slot=SLOT)).record
    assert (placed.node, placed.gpus, placed.gpu_milli) == ("n2", (3,), 1000)
    assert placed.attempt == 1 and placed.request_id not in (None, RID)


def test_what_the_backend_says_of_an_ended_attempt_is_kept() -> None:
    running = record_in(State.RUNNING, False)
    ended_at = NOW + timedelta(minutes=3)
    facts = Facts(NOW, "exit 2", exit_code=2, started_at=NOW, finished_at=ended_at)
    failed = apply(running, Event.FAILED, facts).record
    assert (failed.exit_code, failed.finished_at, failed.message) == (2, ended_at, "exit 2")
    lost = apply(running, Event.LOST, Facts(NOW, "node gone"))
    assert lost.record.phase == "Lost" and lost.record.stopping
    assert lost.effects == {Effect.ASK_STOP}  # what is left of it is stopped


def test_an_event_that_changes_nothing_says_so() -> None:
    running = record_in(State.RUNNING, False)
    assert not apply(running, Event.RUNNING, Facts(NOW)).changed
    starting = record_in(State.STARTING, False).with_(message="queued in Slurm")
    again = apply(starting, Event.UNKNOWN, Facts(NOW, "queued in Slurm"))
    assert not again.changed and again.effects == {Effect.START}
