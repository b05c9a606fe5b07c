"""How often a waiting pod's FailedScheduling is written (backends/kubernetes/events.py): a
repeated note never, a changed note at most every ``REPEAT_SECONDS`` per pod, the newest one
once that time has passed; a bind's Scheduled event always."""

from __future__ import annotations

import time
from typing import Any

import pytest

from aipaas.backends.kubernetes.events import REPEAT_SECONDS, EventSink


class Recorder:
    """Takes the events the sink's thread writes (the one API call it makes)."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def fork(self) -> Recorder:
        return self

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.created.append(obj)
        return obj

    def close(self) -> None:
        pass


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "acme", "uid": f"uid-{name}"}}


def notes(recorder: Recorder, name: str) -> list[str]:
    return [
        e["note"]
        for e in recorder.created
        if e["regarding"]["name"] == name and e["reason"] == "FailedScheduling"
    ]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The sink's clock (time.monotonic), moved by hand."""
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    return now


def test_a_changed_note_waits_its_turn_and_the_newest_is_written_then(clock: list[float]) -> None:
    recorder = Recorder()
    sink = EventSink(recorder, instance="test")  # type: ignore[arg-type]
    sink.failed_scheduling(pod("p"), "0/500 nodes are available: 500 full")
    sink.failed_scheduling(pod("p"), "0/500 nodes are available: 500 full")  # the same: never
    clock[0] += 1.0
    sink.failed_scheduling(pod("p"), "0/500 nodes are available: 499 full")  # too soon
    clock[0] += REPEAT_SECONDS
    sink.failed_scheduling(pod("p"), "0/500 nodes are available: 498 full")
    sink.flush()
    assert notes(recorder, "p") == [
        "0/500 nodes are available: 500 full",
        "0/500 nodes are available: 498 full",
    ]
    sink.close()


def test_each_pod_has_its_own_turn_and_a_bind_is_always_told(clock: list[float]) -> None:
    recorder = Recorder()
    sink = EventSink(recorder, instance="test")  # type: ignore[arg-type]
    sink.failed_scheduling(pod("a"), "waits")
    sink.failed_scheduling(pod("b"), "waits")
    sink.scheduled(pod("a"), "node-1")
    # bound, then waiting again (evicted): its note is new, whatever was written before
    sink.failed_scheduling(pod("a"), "waits")
    sink.flush()
    assert notes(recorder, "a") == ["waits", "waits"] and notes(recorder, "b") == ["waits"]
    assert [e["reason"] for e in recorder.created if e["regarding"]["name"] == "a"] == [
        "FailedScheduling",
        "Scheduled",
        "FailedScheduling",
    ]
    sink.close()
