"""The Slurm backend without Slurm: its reading of sinfo/squeue JSON (22.05's shapes and the
later ones), its sbatch options and script, idempotent starts and adoption by job name, and
fencing. The real daemons are tests/integration/test_slurm_backend.py's."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from aipaas.backends.base import FencingRefused, LaunchRequest, TaskState
from aipaas.backends.slurm import SlurmBackend, jobs
from aipaas.backends.slurm.commands import SlurmCommands, SlurmError
from aipaas.backends.slurm.inventory import gpus_of, read_nodes
from aipaas.backends.slurm.registry import slurm_backend


def node(name: str, state: Any = "idle", flags: Sequence[str] = (), **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "address": f"10.0.0.{name[-1]}",
        "cpus": 8,
        "real_memory": 32000,
        "gres": "gpu:a100:4(S:0-1)",
        "state": state,
        "state_flags": list(flags),
        "partitions": ["main", "gpu"],
        "active_features": "rack1,ib",
        "reason": extra.pop("reason", ""),
        **extra,
    }


class FakeSlurm(SlurmCommands):
    """Answers as slurmctld would; records what was submitted and cancelled."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        super().__init__(None)
        self.node_list = nodes
        self.job_list: list[dict[str, Any]] = []
        self.submitted: list[tuple[list[str], str]] = []
        self.submitting = threading.Lock()
        self.squeue_calls = 0
        self.cancelled: list[int] = []
        self.accounting: str | None = None  # sacct's answer; None: no slurmdbd
        self.sacct_calls = 0

    def nodes(self) -> list[dict[str, Any]]:
        return self.node_list

    def jobs(self) -> list[dict[str, Any]]:
        self.squeue_calls += 1
        return self.job_list

    def submit(self, args: Sequence[str], script: Path) -> int:
        with self.submitting:  # the backend submits from several threads, as sbatch is called
            job_id = 100 + len(self.submitted)
            self.submitted.append((list(args), script.read_text()))
            name = next(a.split("=", 1)[1] for a in args if a.startswith("--job-name="))
            self.job_list.append({"job_id": job_id, "name": name, "job_state": "PENDING"})
        return job_id

    def run(self, args: Sequence[str]) -> str:
        if args[0] != "sacct":
            raise AssertionError(f"unexpected {args}")
        self.sacct_calls += 1
        if self.accounting is None:
            raise SlurmError("sacct failed (1): Slurm accounting storage is disabled")
        return self.accounting

    def cancel(self, job_ids: Sequence[int]) -> None:
        self.cancelled.extend(job_ids)
        for job in self.job_list:
            if job["job_id"] in job_ids:
                job["job_state"] = "CANCELLED"


def request(rid: str = "u1.w-0.0", node_name: str = "n1", **extra: Any) -> LaunchRequest:
    fields: dict[str, Any] = {
        "request_id": rid,
        "task": "w-0",
        "job": "train",
        "tenant": "acme",
        "node": node_name,
        "command": ("python", "-c", "print('it''s')"),
        "env": {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "n1", "MASTER_PORT": "23456"},
        "working_dir": None,
        "gpus": (0, 1),
        "gpu_milli": 1000,
        "log_path": "",
        "cpu_milli": 1500,
        "memory_mib": 512,
    }
    fields.update(extra)
    return LaunchRequest(**fields)


@pytest.fixture
def slurm() -> FakeSlurm:
    return FakeSlurm([node("n1"), node("n2", "idle", ["DRAIN"], reason="bad fan")])


def test_gres_strings() -> None:
    assert gpus_of("gpu:a100:4(S:0-1)") == (4, "A100")
    assert gpus_of("gpu:2,shard:8") == (2, "")
    assert gpus_of("gpu:h100:8(S:0-1),gpu:a100:2") == (10, "H100")
    assert gpus_of("") == (0, "")
    assert gpus_of("mps:100") == (0, "")


def test_node_states_from_both_json_shapes() -> None:
    found = read_nodes(
        [
            node("n1", "mixed"),
            node("n2", "idle", ["DRAIN"]),
            node("n3", "down"),
            node("n4", ["IDLE", "NOT_RESPONDING"]),
            node("n5", ["ALLOCATED", "DRAIN"]),
        ]
    ).by_name
    assert [found[n].healthy for n in ("n1", "n2", "n3", "n4", "n5")] == [
        True,
        False,
        False,
        True,
        False,
    ]
    assert not found["n4"].responding
    info = found["n1"].info
    assert (info.cpu_milli, info.memory_mib, info.gpu_count, info.gpu_model) == (
        8000,
        32000,
        4,
        "A100",
    )
    assert info.labels["slurm.aipaas.dev/partition-gpu"] == "true"
    assert info.labels["slurm.aipaas.dev/feature-ib"] == "true"


def test_inventory_leaves_out_drained_nodes_and_marks_silent_ones_unknown(
    tmp_path: Path,
) -> None:
    fake = FakeSlurm(
        [node("n1"), node("n2", "idle", ["DRAIN"]), node("n3", ["MIXED", "NOT_RESPONDING"])]
    )
    inventory = SlurmBackend(tmp_path, commands=fake).inventory()
    assert [n.name for n in inventory.nodes] == ["n1", "n3"]
    assert inventory.unknown == {"n3"}
    assert {s.spec.node_name for s in inventory.slices} == {"n1", "n3"}


def test_third_party_mode_offers_partitions(tmp_path: Path) -> None:
    fake = FakeSlurm([node("n1"), node("n2"), node("n3", "down")])
    backend = SlurmBackend(tmp_path, commands=fake, mode="third-party")
    nodes = {n.name: n for n in backend.inventory().nodes}
    assert set(nodes) == {"slurm-partition-main", "slurm-partition-gpu"}
    assert nodes["slurm-partition-gpu"].gpu_count == 8  # the two healthy nodes
    backend.start(request(node_name="slurm-partition-gpu"))
    options = fake.submitted[0][0]
    assert "--partition=gpu" in options
    assert not any(o.startswith("--nodelist") for o in options)
    with pytest.raises(ValueError, match="not a Slurm partition"):
        backend.start(request("u2.w-0.0", node_name="n1"))


def test_exit_codes_from_both_json_shapes() -> None:
    assert jobs.exit_code({"exit_code": 3 << 8}) == 3
    assert jobs.exit_code({"exit_code": 9}) == 137
    assert jobs.exit_code({"exit_code": {"return_code": {"set": True, "number": 5}}}) == 5
    assert jobs.exit_code({"exit_code": {"return_code": 0, "signal": {"id": 15}}}) == 143
    assert jobs.exit_code({}) is None


@pytest.mark.parametrize(
    ("state", "stopped", "want", "code"),
    [
        ("PENDING", False, TaskState.UNKNOWN, None),
        ("PENDING", True, TaskState.RUNNING, None),
        ("RUNNING", False, TaskState.RUNNING, None),
        (["COMPLETING"], False, TaskState.RUNNING, None),
        ("COMPLETED", False, TaskState.SUCCEEDED, 0),
        ("FAILED", False, TaskState.FAILED, 3),
        ("CANCELLED", True, TaskState.FAILED, 143),
        ("CANCELLED", False, TaskState.LOST, None),
        (["NODE_FAIL"], False, TaskState.LOST, None),
        ("OUT_OF_MEMORY", False, TaskState.FAILED, 137),
    ],
)
def test_slurm_states(state: Any, stopped: bool, want: TaskState, code: int | None) -> None:
    exit_code = {"FAILED": 3 << 8}.get(state if isinstance(state, str) else "", 0)
    job = {"job_id": 7, "job_state": state, "state_reason": "Resources", "exit_code": exit_code}
    status = jobs.status_of("r", job, stopped=stopped)
    assert (status.state, status.exit_code) == (want, code)
    if state == "PENDING":
        assert "pending in Slurm (Resources)" in status.message


def test_start_pins_the_node_and_asks_for_the_task_resources(
    tmp_path: Path, slurm: FakeSlurm
) -> None:
    backend = SlurmBackend(tmp_path, commands=slurm)
    log_path = tmp_path / "logs" / "acme" / "w-0.log"
    backend.start(request(log_path=str(log_path)))
    options, script = slurm.submitted[0]
    for wanted in (
        "--job-name=aipaas.u1.w-0.0",
        "--nodelist=n1",
        "--gres=gpu:2",
        "--cpus-per-task=2",
        "--mem=512M",
        "--partition=main",
        "--export=NIL",
        f"--output={log_path}",
    ):
        assert wanted in options, (wanted, options)
    assert "export MASTER_ADDR=10.0.0.1" in script  # Slurm's NodeAddr of rank 0's node
    assert "CUDA_VISIBLE_DEVICES" not in script  # Slurm's binding decides
    assert log_path.parent.is_dir() and oct(log_path.parent.stat().st_mode)[-3:] == "700"
    with pytest.raises(ValueError, match="no node n9"):
        backend.start(request("u1.w-1.0", node_name="n9"))


def test_starts_are_idempotent_and_adopt_jobs_by_name(tmp_path: Path, slurm: FakeSlurm) -> None:
    backend = SlurmBackend(tmp_path, commands=slurm)
    backend.start(request())
    backend.start(request())
    SlurmBackend(tmp_path, commands=slurm).start(request())  # a restarted server
    assert len(slurm.submitted) == 1
    # Submitted by a server that died before writing the id down: found by name.
    slurm.job_list.append({"job_id": 55, "name": "aipaas.u9.w-0.0", "job_state": "RUNNING"})
    backend = SlurmBackend(tmp_path, commands=slurm)  # the server after that one
    backend.start(request("u9.w-0.0"))
    assert len(slurm.submitted) == 1
    assert backend.status(["u9.w-0.0"])["u9.w-0.0"].state is TaskState.RUNNING
    assert (backend.run_dir / "u9.w-0.0" / "job").read_text() == "55"


def test_one_squeue_serves_the_starts_of_a_cycle(tmp_path: Path, slurm: FakeSlurm) -> None:
    """Starts check for adoptable jobs in the cycle's squeue (not one squeue per start); the
    status after them reads squeue again, so it sees the jobs just submitted."""
    backend = SlurmBackend(tmp_path, commands=slurm)
    backend.status([])
    before = slurm.squeue_calls
    for index in range(4):
        backend.start(request(f"u{index}.w-0.0"))
    assert slurm.squeue_calls == before and len(slurm.submitted) == 4
    answers = backend.status([f"u{index}.w-0.0" for index in range(4)])
    assert slurm.squeue_calls == before + 1
    assert all(a.state is not TaskState.LOST for a in answers.values())


class SlowSlurm(FakeSlurm):
    """sbatch answers only when the test lets it."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        super().__init__(nodes)
        self.answer = threading.Event()

    def submit(self, args: Sequence[str], script: Path) -> int:
        assert self.answer.wait(10)
        return super().submit(args, script)


def test_starts_submit_off_the_callers_thread(tmp_path: Path, slurm: FakeSlurm) -> None:
    """A start returns before sbatch answers; until then the task is not started (being
    submitted), a repeated start submits nothing more, a stop waits for the job id and
    cancels the job; a failed sbatch makes the task lost with sbatch's words."""
    slow = SlowSlurm(slurm.node_list)
    backend = SlurmBackend(tmp_path, commands=slow, submit_workers=2)
    backend.start(request("a.w-0.0"))
    backend.start(request("b.w-0.0"))
    backend.start(request("a.w-0.0"))
    assert slow.submitted == []
    answer = backend.status(["a.w-0.0"])["a.w-0.0"]
    assert answer.state is TaskState.UNKNOWN and answer.message == "being submitted to Slurm"
    slow.answer.set()
    backend.stop("b.w-0.0")  # waits for b's job id, then cancels it
    deadline = time.monotonic() + 10  # a's submission runs on another worker: let it end
    while len(slow.submitted) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(a[0] for a, _ in slow.submitted) == [
        "--job-name=aipaas.a.w-0.0",
        "--job-name=aipaas.b.w-0.0",
    ]
    assert slow.cancelled == [int((backend.run_dir / "b.w-0.0" / "job").read_text())]
    backend.close()
    answers = backend.status(["a.w-0.0", "b.w-0.0"])
    assert answers["a.w-0.0"].state is TaskState.UNKNOWN  # pending in Slurm
    assert "pending" in answers["a.w-0.0"].message.lower()

    def refuse(args: Sequence[str], script: Path) -> int:
        raise SlurmError("sbatch: error: Batch job submission failed: Invalid account")

    slow.submit = refuse  # type: ignore[method-assign]
    backend.start(request("c.w-0.0"))
    backend.close()
    lost = backend.status(["c.w-0.0"])["c.w-0.0"]
    assert lost.state is TaskState.LOST and "Invalid account" in lost.message


def test_status_when_slurm_has_forgotten_the_job(tmp_path: Path, slurm: FakeSlurm) -> None:
    backend = SlurmBackend(tmp_path, commands=slurm)
    backend.start(request("a.w-0.0"))
    backend.start(request("b.w-0.0"))
    (backend.run_dir / "a.w-0.0" / "exit").write_text("0\n")
    slurm.job_list.clear()  # MinJobAge passed
    backend._jobs = None
    answers = backend.status(["a.w-0.0", "b.w-0.0", "never"])
    assert answers["a.w-0.0"].state is TaskState.SUCCEEDED
    assert answers["b.w-0.0"].state is TaskState.LOST
    assert "no longer knows job 101" in answers["b.w-0.0"].message
    assert answers["never"].state is TaskState.UNKNOWN


def test_stop_cancels_and_the_end_counts_as_stopped(tmp_path: Path, slurm: FakeSlurm) -> None:
    backend = SlurmBackend(tmp_path, commands=slurm)
    backend.start(request())
    backend.stop("u1.w-0.0")
    assert slurm.cancelled == [100]
    status = backend.status(["u1.w-0.0"])["u1.w-0.0"]
    assert (status.state, status.exit_code, status.message) == (TaskState.FAILED, 143, "stopped")
    backend.stop("u1.w-0.0")  # ended: nothing more to cancel
    backend.stop("never-started")
    assert slurm.cancelled == [100]


def test_fencing_refuses_a_stale_token(tmp_path: Path, slurm: FakeSlurm) -> None:
    backend = slurm_backend(tmp_path, None, "pinned")
    inner = backend.inner  # type: ignore[attr-defined]
    inner.commands = slurm
    backend.start(request("x.w-0.0", fencing_token=5))
    with pytest.raises(FencingRefused):
        backend.start(request("y.w-0.0", fencing_token=4))
    backend.close()  # waits for the sbatch calls in flight
    assert [a[0] for a, _ in slurm.submitted] == ["--job-name=aipaas.x.w-0.0"]
    with pytest.raises(ValueError, match="--slurm-mode"):
        slurm_backend(tmp_path, None, "anywhere")


def test_the_batch_script_runs_the_command_and_records_its_exit(tmp_path: Path) -> None:
    exit_file = tmp_path / "exit"
    work = tmp_path / "work dir"
    work.mkdir()
    launch = request(
        command=("bash", "-c", 'echo "$RANK $WORLD_SIZE [$CUDA_VISIBLE_DEVICES] $PWD"; exit 4'),
        gpus=(),
        gpu_milli=0,
        working_dir=str(work),
        env={"RANK": "1", "WORLD_SIZE": "2", "ODD": "a 'quoted' $value"},
    )
    script = tmp_path / "job.sh"
    script.write_text(jobs.batch_script(launch, launch.env, str(exit_file)))
    done = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ["PATH"], "CUDA_VISIBLE_DEVICES": "0,1"},
    )
    assert done.returncode == 4
    assert done.stdout == f"1 2 [] {work}\n"  # no GPU asked: none visible
    assert exit_file.read_text() == "4\n"
    assert "export ODD='a '\"'\"'quoted'\"'\"' $value'" in script.read_text()


def test_accounting_answers_for_jobs_slurmctld_forgot(tmp_path: Path, slurm: FakeSlurm) -> None:
    backend = SlurmBackend(tmp_path, commands=slurm)
    for rid in ("a.w-0.0", "b.w-0.0"):
        backend.start(request(rid))
    slurm.job_list.clear()
    backend._jobs = None
    slurm.accounting = "100|FAILED|2:0\n101|CANCELLED by 0|0:15\n"
    answers = backend.status(["a.w-0.0", "b.w-0.0"])
    assert (answers["a.w-0.0"].state, answers["a.w-0.0"].exit_code) == (TaskState.FAILED, 2)
    assert answers["b.w-0.0"].state is TaskState.LOST  # cancelled, not by aipaas
    # No slurmdbd: Lost, and sacct is not asked again at every status call.
    slurm.accounting = None
    other = SlurmBackend(tmp_path, commands=slurm)
    calls = slurm.sacct_calls
    assert other.status(["a.w-0.0"])["a.w-0.0"].state is TaskState.LOST
    other.status(["a.w-0.0", "b.w-0.0"])
    assert slurm.sacct_calls == calls + 1


def test_attempts_of_one_task_share_a_working_directory_under_the_run_directory(
    tmp_path: Path, slurm: FakeSlurm
) -> None:
    backend = SlurmBackend(tmp_path, commands=slurm)
    backend.start(request("u1.w-0.0", work_key="u1.w-0"))
    backend.start(request("u1.w-0.1", work_key="u1.w-0"))  # its restart
    backend.start(request("u1.w-1.0", work_key="u1.w-1"))  # another task of the job
    home = backend.run_dir / "workdirs" / "u1.w-0"
    assert home.is_dir()
    first, restart, other = slurm.submitted
    for options, script in (first, restart):
        assert f"--chdir={home}" in options
        assert f"export AIPAAS_WORKDIR={home}" in script
        assert f"export HOME={home}" in script
    assert f"--chdir={backend.run_dir / 'workdirs' / 'u1.w-1'}" in other[0]
    # without a work key: the attempt's own
    backend.start(request("u2.w-0.0"))
    assert f"--chdir={backend.run_dir / 'workdirs' / 'u2.w-0.0'}" in slurm.submitted[-1][0]
    with pytest.raises(ValueError, match="invalid work key"):
        backend.start(request("u3.w-0.0", work_key="../elsewhere"))
