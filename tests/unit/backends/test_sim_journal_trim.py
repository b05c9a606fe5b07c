"""The sim journal is trimmed: finished tasks beyond the count (or a day old) are dropped by a
rewrite, running ones are kept, and another backend on the same journal follows the rewrite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aipaas.backends.base import LaunchRequest, NodeInfo, TaskState
from aipaas.backends.sim import SimBackend
from aipaas.backends.sim.journal import DEFAULT_MAX_AGE_SECONDS, kept
from aipaas.clock import VirtualClock

NODE = NodeInfo(name="sim-0", backend="sim", cpu_milli=8000, memory_mib=16384)


def request(request_id: str, tmp_path: Path, duration: float) -> LaunchRequest:
    return LaunchRequest(
        request_id=request_id,
        task="w-0",
        job="j",
        tenant="acme",
        node="sim-0",
        command=("train",),
        env={},
        working_dir=None,
        gpus=(),
        gpu_milli=0,
        log_path=str(tmp_path / "logs" / f"{request_id}.log"),
        duration_seconds=duration,
    )


def journal_lines(tmp_path: Path) -> int:
    return len((tmp_path / "run" / "sim" / "journal.jsonl").read_bytes().splitlines())


def test_finished_tasks_beyond_the_count_are_dropped_and_running_ones_kept(
    tmp_path: Path,
) -> None:
    clock = VirtualClock()
    backend = SimBackend(tmp_path / "run", [NODE], clock, journal_max_records=10)
    backend.start(request("long", tmp_path, duration=1e6))
    most = 0
    for i in range(300):
        rid = f"t{i:03d}"
        backend.start(request(rid, tmp_path, duration=1))
        clock.advance(2)
        assert backend.status([rid])[rid].state is TaskState.SUCCEEDED  # its end reported
        most = max(most, journal_lines(tmp_path))
    # Two lines a task (its start, its reported end): 601 lines untrimmed. Kept: the running
    # task, the 10 newest finished, and those within the grace (30 at one task per 2 s); the
    # journal is rewritten when it has twice the lines the last rewrite kept.
    assert most <= 2 * (1 + 10 + 30) + 2
    states = backend.status(["long", "t299", "t290", "t000", "t100"])
    assert states["long"].state is TaskState.RUNNING
    assert states["t299"].state is TaskState.SUCCEEDED
    assert states["t290"].state is TaskState.SUCCEEDED
    assert states["t000"].state is TaskState.UNKNOWN  # dropped
    assert states["t100"].state is TaskState.UNKNOWN
    restarted = SimBackend(tmp_path / "run", [NODE], clock, journal_max_records=10)
    assert restarted.status(["long"])["long"].state is TaskState.RUNNING


def test_another_backend_on_the_journal_follows_a_rewrite(tmp_path: Path) -> None:
    clock = VirtualClock()
    one = SimBackend(tmp_path / "run", [NODE], clock, journal_max_records=4)
    other = SimBackend(tmp_path / "run", [NODE], clock, journal_max_records=10**6)
    journal = tmp_path / "run" / "sim" / "journal.jsonl"
    read_by_other = None
    for i in range(200):
        rid = f"t{i:03d}"
        one.start(request(rid, tmp_path, duration=1))
        clock.advance(2)
        one.status([rid])
        if i == 100:
            other.status(["t100"])  # reads the journal as it is now
            read_by_other = journal.stat().st_ino
        elif read_by_other is not None and journal.stat().st_ino != read_by_other:
            break  # ``one`` rewrote the journal since ``other`` read it
    else:
        raise AssertionError("the journal was never rewritten")
    other.start(request("after", tmp_path, duration=100))  # appends to the new journal
    assert one.status(["after"])["after"].state is TaskState.RUNNING
    assert other.status(["t000"])["t000"].state is TaskState.UNKNOWN  # dropped by the rewrite
    assert other.status([rid])[rid].state is TaskState.SUCCEEDED


def test_what_is_kept() -> None:
    now = 10 * DEFAULT_MAX_AGE_SECONDS
    records: dict[str, dict[str, Any]] = {
        "running": {"start": now - 5, "duration": 100, "stopped": None},
        "ended-unreported": {"start": now - 500, "duration": 1, "stopped": None},
        "reported-just-now": {"start": now - 10, "duration": 1, "logged_end": True},
        "stopped-just-now": {"start": now - 100, "duration": 1e6, "stopped": now - 1},
        "reported-old": {"start": now - 500, "duration": 1, "logged_end": True},
        "stopped-old": {"start": now - 900, "duration": 1e6, "stopped": now - 400},
        "a-day-old": {
            "start": now - DEFAULT_MAX_AGE_SECONDS - 10,
            "duration": 1,
            "logged_end": True,
        },
    }
    assert set(kept(records, now, 1, DEFAULT_MAX_AGE_SECONDS)) == {
        "running",
        "ended-unreported",
        "reported-just-now",
        "stopped-just-now",
        "stopped-old",  # ended 400 s ago: the newest finished one, within the count of 1
    }
    assert set(kept(records, now, 0, DEFAULT_MAX_AGE_SECONDS)) == {
        "running",
        "ended-unreported",
        "reported-just-now",
        "stopped-just-now",
    }
    assert "a-day-old" not in kept(records, now, 100, DEFAULT_MAX_AGE_SECONDS)
