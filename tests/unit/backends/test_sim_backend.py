"""The sim backend's journal: tasks survive a restart, another process's tasks are seen, a
half-written last line (a crash) is skipped, and the older file-per-task records still load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aipaas.backends.base import LaunchRequest, NodeInfo, TaskState
from aipaas.backends.sim import SimBackend
from aipaas.clock import VirtualClock

NODE = NodeInfo(name="sim-0", backend="sim", cpu_milli=8000, memory_mib=16384)


def _request(request_id: str, tmp_path: Path, duration: float = 10.0) -> LaunchRequest:
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


def _backend(tmp_path: Path, clock: VirtualClock) -> SimBackend:
    return SimBackend(tmp_path / "run", [NODE], clock)


def test_a_task_runs_its_time_then_succeeds_and_says_so_in_its_log(tmp_path: Path) -> None:
    clock = VirtualClock()
    backend = _backend(tmp_path, clock)
    backend.start(_request("a", tmp_path))
    assert backend.status(["a"])["a"].state is TaskState.RUNNING
    clock.advance(11)
    assert backend.status(["a"])["a"].state is TaskState.SUCCEEDED
    log = (tmp_path / "logs" / "a.log").read_text()
    assert "started on sim-0" in log and "finished after 10s with exit code 0" in log


def test_a_restarted_backend_finds_its_tasks_and_does_not_start_them_again(
    tmp_path: Path,
) -> None:
    clock = VirtualClock()
    first = _backend(tmp_path, clock)
    first.start(_request("a", tmp_path))
    first.start(_request("b", tmp_path))
    first.stop("b")
    clock.advance(5)
    again = _backend(tmp_path, clock)
    states = {rid: st.state for rid, st in again.status(["a", "b", "c"]).items()}
    assert states == {"a": TaskState.RUNNING, "b": TaskState.FAILED, "c": TaskState.UNKNOWN}
    again.start(_request("a", tmp_path, duration=100))  # idempotent: the first start stands
    clock.advance(6)
    assert again.status(["a"])["a"].state is TaskState.SUCCEEDED


def test_what_another_process_appends_is_seen(tmp_path: Path) -> None:
    clock = VirtualClock()
    mine, theirs = _backend(tmp_path, clock), _backend(tmp_path, clock)
    theirs.start(_request("t", tmp_path))
    mine.start(_request("m", tmp_path))
    assert mine.status(["t"])["t"].state is TaskState.RUNNING
    theirs.stop("m")
    assert mine.status(["m"])["m"].state is TaskState.FAILED
    mine.start(_request("t", tmp_path))  # started elsewhere: not again
    lines = (tmp_path / "run" / "sim" / "journal.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["t", "m", "m"]


def test_a_half_written_last_line_is_skipped_and_the_journal_goes_on(tmp_path: Path) -> None:
    clock = VirtualClock()
    first = _backend(tmp_path, clock)
    first.start(_request("a", tmp_path))
    journal = tmp_path / "run" / "sim" / "journal.jsonl"
    with journal.open("a") as handle:
        handle.write('{"id":"b","start":')  # the crash came mid-write
    again = _backend(tmp_path, clock)
    assert again.status(["a", "b"])["b"].state is TaskState.UNKNOWN
    again.start(_request("c", tmp_path))
    third = _backend(tmp_path, clock)
    states = {rid: st.state for rid, st in third.status(["a", "b", "c"]).items()}
    assert states == {"a": TaskState.RUNNING, "b": TaskState.UNKNOWN, "c": TaskState.RUNNING}


def test_records_of_the_file_per_task_layout_still_load(tmp_path: Path) -> None:
    clock = VirtualClock()
    old = tmp_path / "run" / "sim"
    old.mkdir(parents=True)
    record = {
        "start": clock.now().timestamp(),
        "duration": 3,
        "log": str(tmp_path / "x.log"),
        "task": "w-0",
        "stopped": None,
        "exit_code": 0,
    }
    (old / "legacy.json").write_text(json.dumps(record))
    backend = _backend(tmp_path, clock)
    assert backend.status(["legacy"])["legacy"].state is TaskState.RUNNING


@pytest.mark.parametrize("bad", ["../escape", ".hidden", "two\nlines"])
def test_a_bad_request_id_is_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="invalid request id"):
        _backend(tmp_path, VirtualClock()).start(_request(bad, tmp_path))
