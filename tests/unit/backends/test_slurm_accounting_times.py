"""The times Slurm really ran a task (squeue's start, sacct's start and end) reach the task's
record and the usage ledger instead of the controller's observations. The real slurmdbd is
tests/integration/test_slurm_accounting.py's."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aipaas.api.tenancy import Role
from aipaas.backends.base import LaunchRequest, TaskState, TaskStatus
from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.backends.slurm import SlurmBackend
from aipaas.backends.slurm.accounting import epoch, squeue_times
from aipaas.backends.slurm.commands import SlurmCommands, SlurmError
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.server.service import ObjectService
from aipaas.store import Store
from aipaas.store.ledger import list_entries
from aipaas.tenancy.principal import Principal

T0 = 1_795_000_000
REQUEST = LaunchRequest(
    request_id="u1.w-0.0", task="w-0", job="train", tenant="acme", node="slurm-partition-main",
    command=("true",), env={}, working_dir=None, gpus=(), gpu_milli=0, log_path="",
)  # fmt: skip
NODE = {"name": "n1", "address": "n1", "cpus": 8, "real_memory": 32000, "gres": "",
        "state": "idle", "state_flags": [], "partitions": ["main"]}  # fmt: skip


class Slurm(SlurmCommands):
    """squeue's jobs as the test sets them; sacct's answer (None: no slurmdbd)."""

    def __init__(self) -> None:
        super().__init__(None)
        self.job_list: list[dict[str, Any]] = []
        self.sacct: list[dict[str, Any]] | None = None
        self.sacct_calls: list[Sequence[str]] = []

    def nodes(self) -> list[dict[str, Any]]:
        return [NODE]

    def jobs(self) -> list[dict[str, Any]]:
        return self.job_list

    def submit(self, args: Sequence[str], script: Path) -> int:
        self.job_list.append({"job_id": 7, "name": "aipaas.u1.w-0.0", "job_state": "PENDING"})
        return 7

    def run(self, args: Sequence[str]) -> str:
        self.sacct_calls.append(args)
        if self.sacct is None:
            raise SlurmError("sacct failed (1): Slurm accounting storage is disabled")
        return json.dumps({"errors": [], "jobs": self.sacct})


def at(seconds: int) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, UTC)


def test_slurm_times_in_both_shapes() -> None:
    assert epoch(T0) == at(0)
    assert epoch({"set": True, "number": T0 + 5}) == at(5)
    assert epoch({"set": False, "number": 0}) is None
    assert epoch(0) is None and epoch(None) is None
    pending = {"job_state": "PENDING", "start_time": T0 + 99, "end_time": T0 + 199}
    assert squeue_times(pending) == (None, None)  # Slurm's estimate: not a start
    running = {"job_state": ["RUNNING"], "start_time": T0, "end_time": T0 + 3600}
    assert squeue_times(running) == (at(0), None)  # end_time is the time limit


def test_status_carries_slurms_times(tmp_path: Path) -> None:
    slurm = Slurm()
    backend = SlurmBackend(tmp_path, commands=slurm, mode="third-party")
    backend.inventory()
    backend.start(REQUEST)
    (job,) = slurm.job_list
    assert backend.status([REQUEST.request_id])[REQUEST.request_id].started_at is None
    job.update(job_state="RUNNING", start_time=T0 + 30, end_time=T0 + 99_999)
    backend._jobs = None
    answer = backend.status([REQUEST.request_id])[REQUEST.request_id]
    assert (answer.state, answer.started_at, answer.finished_at) == (
        TaskState.RUNNING, at(30), None,
    )  # fmt: skip
    assert slurm.sacct_calls == []  # sacct only for jobs that ended
    # Ended: accounting's times (it rounds as slurmctld does; here they differ to tell them
    # apart), one sacct call for the cycle.
    job.update(job_state="COMPLETED", end_time=T0 + 40, exit_code=0)
    slurm.sacct = [{"job_id": 7, "time": {"start": T0 + 31, "end": T0 + 41}}]
    backend._jobs = None
    answer = backend.status([REQUEST.request_id])[REQUEST.request_id]
    assert (answer.state, answer.started_at, answer.finished_at) == (
        TaskState.SUCCEEDED, at(31), at(41),
    )  # fmt: skip
    assert [list(a[:3]) for a in slurm.sacct_calls] == [["sacct", "--json", "-X"]]
    # Accounting not caught up yet (no end): slurmctld's times.
    slurm.sacct = [{"job_id": 7, "time": {"start": T0 + 31, "end": 0}}]
    answer = backend.status([REQUEST.request_id])[REQUEST.request_id]
    assert (answer.started_at, answer.finished_at) == (at(30), at(40))
    # No slurmdbd: slurmctld's times, and sacct is not asked again soon.
    slurm.sacct = None
    other = SlurmBackend(tmp_path, commands=slurm, mode="third-party")
    for _ in range(3):
        answer = other.status([REQUEST.request_id])[REQUEST.request_id]
        assert (answer.started_at, answer.finished_at) == (at(30), at(40))
    assert len(slurm.sacct_calls) == 3


class Timed:
    """The simulator, with the times a backend says its tasks really ran."""

    def __init__(self, inner: SimBackend, times: Mapping[str, datetime]) -> None:
        self.inner = inner
        self.name = inner.name
        self.times = times

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        answers = self.inner.status(request_ids)
        return {
            rid: replace(a, started_at=self.times["start"])
            if a.state is TaskState.RUNNING
            else replace(a, started_at=self.times["start"], finished_at=self.times["end"])
            if a.state is TaskState.SUCCEEDED
            else a
            for rid, a in answers.items()
        }


JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {name: train, annotations: {sim.aipaas.dev/duration: "600"}}
spec:
  queue: research
  tasks:
    - name: w
      command: [train]
      resources: {cpu: 1, memory: 1Gi, gpu: 1}
"""
SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
"""


def test_the_ledger_charges_the_times_the_backend_reports(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    try:
        ObjectService(store, Principal("admin", "", Role.PLATFORM_ADMIN)).apply_text(SETUP)
        ObjectService(store, Principal("alice", "acme", Role.MEMBER)).apply_text(JOB)
        clock = VirtualClock()
        start = clock.now() + timedelta(seconds=100)  # it waited in the engine's queue
        times = {"start": start, "end": start + timedelta(seconds=300)}
        backend = Timed(SimBackend(tmp_path / "run", load_cluster(), clock), times)
        ctl = Controller(store, backend, log_dir=tmp_path / "logs", clock=clock)
        ctl.run_cycle()
        clock.advance(700)
        ctl.run_cycle()
        (entry,) = list_entries(store)
        assert (entry.started_at, entry.ended_at) == (start, start + timedelta(seconds=300))
        assert abs(entry.gpu_hours - 300 / 3600) < 1e-9
    finally:
        store.close()
