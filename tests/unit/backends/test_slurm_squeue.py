"""The Slurm backend's squeue reading: the text lines ``SlurmCommands.jobs`` asks for (seven
fields, times as epochs) become the records squeue's JSON gives, and what they mean for a task
(state, Slurm's reason, exit code, times). The real squeue is tests/integration's."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from aipaas.backends.base import LaunchRequest, TaskState
from aipaas.backends.slurm import SlurmBackend, jobs
from aipaas.backends.slurm.accounting import squeue_times
from aipaas.backends.slurm.commands import SQUEUE_FIELDS, SlurmCommands, parse_squeue

LINES = "\n".join(
    [
        "101|PENDING|Resources|1795492900|N/A|0|aipaas.t1.w-0.a1",
        "102|RUNNING|None|1795492901|1795496501|0|aipaas.t1.w-1.a1",
        "103|COMPLETED|None|1795492902|1795492905|0|aipaas.t2.w-0.a1",
        "104|FAILED|NonZeroExitCode|1795492902|1795492906|768|aipaas.t3.w-0.a1",
        "105|CANCELLED|None|1795492902|1795492907|15|a name|with the separator",
        "106|FAILED|None|1795492902|1795492907|2:0|aipaas.t4.w-0.a1",
        "107_3|RUNNING|None|1795492902|N/A|0|an array task",
        "",
        "garbage",
    ]
)


class Recorder(SlurmCommands):
    """Answers squeue with ``LINES``; records the command."""

    def __init__(self) -> None:
        super().__init__(None)
        self.asked: list[list[str]] = []

    def run(self, args: Sequence[str]) -> str:
        self.asked.append(list(args))
        return LINES


def test_jobs_asks_squeue_for_the_fields_it_reads_as_epochs() -> None:
    commands = Recorder()
    found = commands.jobs()
    (args,) = commands.asked
    assert args[0] == "squeue" and "--states=all" in args and "--noheader" in args
    layout = next(a for a in args if a.startswith("--Format="))
    assert [f.split(":")[0] for f in layout.removeprefix("--Format=").split(",")] == list(
        SQUEUE_FIELDS
    )
    assert layout.endswith(",Name:")  # the name last, unpadded
    assert commands._env["SLURM_TIME_FORMAT"] == "%s"
    assert [j["job_id"] for j in found] == [101, 102, 103, 104, 105, 106]  # no array task


def test_lines_become_squeue_records() -> None:
    by_id = {j["job_id"]: j for j in parse_squeue(LINES)}
    assert by_id[101] == {
        "job_id": 101,
        "job_state": "PENDING",
        "state_reason": "Resources",
        "start_time": 1795492900,
        "end_time": 0,
        "exit_code": 0,
        "name": "aipaas.t1.w-0.a1",
    }
    assert by_id[105]["name"] == "a name|with the separator"
    assert by_id[104]["exit_code"] == 768
    assert by_id[106]["exit_code"] == 2 << 8  # "code:signal", as later versions may write it
    assert parse_squeue("108|RUNNING|None|N/A|Unknown||x")[0]["exit_code"] is None


def test_what_the_records_mean_for_a_task() -> None:
    by_id = {j["job_id"]: j for j in parse_squeue(LINES)}
    pending = jobs.status_of("r", by_id[101], stopped=False)
    assert pending.state is TaskState.UNKNOWN and "(Resources)" in pending.message
    assert jobs.status_of("r", by_id[102], stopped=False).state is TaskState.RUNNING
    done = jobs.status_of("r", by_id[103], stopped=False)
    assert (done.state, done.exit_code) == (TaskState.SUCCEEDED, 0)
    failed = jobs.status_of("r", by_id[104], stopped=False)
    assert (failed.state, failed.exit_code) == (TaskState.FAILED, 3)
    stopped = jobs.status_of("r", by_id[105], stopped=True)
    assert (stopped.state, stopped.exit_code) == (TaskState.FAILED, 143)  # SIGTERM
    assert jobs.status_of("r", by_id[106], stopped=False).exit_code == 2
    at = datetime.fromtimestamp
    assert squeue_times(by_id[101]) == (None, None)  # a pending job's start is an estimate
    assert squeue_times(by_id[102]) == (at(1795492901, UTC), None)  # end: the time limit
    assert squeue_times(by_id[103]) == (at(1795492902, UTC), at(1795492905, UTC))


def test_each_cycles_status_reads_squeue_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Status calls a cycle apart (0.2 s at the least) each read squeue: a job that started or
    ended between them is seen by the second; calls within one cycle share one read, as do
    the starts (which look only for jobs of a server before this one)."""
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])  # the backend's clock
    commands = Counting()
    backend = SlurmBackend(tmp_path, commands=commands)
    commands.lines = "7|PENDING|Priority|0|0|0|aipaas.u1.w-0.0"
    assert backend.status(["u1.w-0.0"])["u1.w-0.0"].state is TaskState.UNKNOWN
    clock[0] += 0.05  # the same cycle: the same answer
    assert backend.status(["u1.w-0.0"])["u1.w-0.0"].state is TaskState.UNKNOWN
    assert commands.calls == 1
    commands.lines = "7|RUNNING|None|1795492901|0|0|aipaas.u1.w-0.0"
    clock[0] += 0.2  # the next cycle
    assert backend.status(["u1.w-0.0"])["u1.w-0.0"].state is TaskState.RUNNING
    assert commands.calls == 2
    clock[0] += 0.1
    backend.start(request_for("u2.w-0.0"))  # looks for an adoptable job in that answer
    assert commands.calls == 2 and commands.submitted == 1


class Counting(SlurmCommands):
    """squeue answers ``lines``; sbatch is counted; one node, n1."""

    def __init__(self) -> None:
        super().__init__(None)
        self.lines = ""
        self.calls = 0
        self.submitted = 0

    def jobs(self) -> list[dict[str, Any]]:
        self.calls += 1
        return parse_squeue(self.lines)

    def nodes(self) -> list[dict[str, Any]]:
        return [
            {"name": "n1", "address": "10.0.0.1", "cpus": 8, "real_memory": 32000, "gres": "",
             "state": "idle", "state_flags": [], "partitions": ["main"], "reason": ""}
        ]  # fmt: skip

    def submit(self, args: Sequence[str], script: Path) -> int:
        self.submitted += 1
        return 8


def request_for(rid: str) -> LaunchRequest:
    return LaunchRequest(
        request_id=rid, task="w-0", job="j", tenant="acme", node="n1", command=("true",),
        env={}, working_dir=None, gpus=(), gpu_milli=0, log_path="", cpu_milli=1000,
        memory_mib=64,
    )  # fmt: skip
