"""What the PyTorch workload tests share (test_pytorch_local.py, test_pytorch_slurm.py,
test_pytorch_ray.py): the tests' own PyTorch (tests/support/model_venv.py: skipped only when pip
cannot install it, saying so), the training script (examples/pytorch/train.py) copied where a task's
user can read it, Job manifests that start it by the platform's variables or under torchrun, what
the script leaves in its output folder, read back, and the five cases every backend runs through the
API (each backend's module sizes the jobs to its nodes)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import model_venv
from tests.support.server_process import ServerProcess, shared_dir

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "pytorch" / "train.py"


def torch_python() -> Path:
    """The Python of the tests' PyTorch environment (made when absent: about 3 GB once)."""
    try:
        return model_venv.ensure()
    except model_venv.Unavailable as err:
        pytest.skip(f"PyTorch could not be installed by pip: {err}")


def workspace() -> tuple[Path, Path]:
    """A folder every task user can write (its ``out``), with the training script in it."""
    out = shared_dir()
    script = out / "train.py"
    shutil.copy(SCRIPT, script)
    script.chmod(0o644)
    return out, script


def job(
    name: str,
    command: list[str],
    *,
    replicas: int = 2,
    cpu: str = "1",
    extra: str = "",
    env: dict[str, str] | None = None,
) -> str:
    """A Job of ``replicas`` tasks running ``command`` (``extra``: more lines of its spec)."""
    variables = json.dumps(env or {})
    return f"""apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, tenant: acme}}
spec:
  queue: research
{extra}  tasks:
    - name: w
      replicas: {replicas}
      command: {json.dumps(command)}
      env: {variables}
      resources: {{cpu: {cpu}, memory: 1Gi}}
"""


def torchrun(python: Path) -> str:
    return str(python.parent / "torchrun")


def torchrun_across_tasks(python: Path, script: Path, out: Path, steps: int = 100) -> list[str]:
    """torchrun with one node per task, from the platform's variables (``$(VAR)``)."""
    return [
        torchrun(python),
        "--nnodes=$(WORLD_SIZE)",
        "--node-rank=$(RANK)",
        "--nproc-per-node=1",
        "--master-addr=$(MASTER_ADDR)",
        "--master-port=$(MASTER_PORT)",
        str(script),
        "--steps",
        str(steps),
        "--out",
        str(out),
    ]


def worlds(out: Path) -> list[str]:
    """The world size each worker saw at its start, in the order they started."""
    found = sorted(out.glob("world-*"), key=lambda p: float(p.name.split("-")[1]))
    return [p.read_text() for p in found]


def apply(server: ServerProcess, manifest: str) -> None:
    with server.http() as client:
        answer = client.post("/apply", content=manifest)
        assert answer.status_code in (200, 201), answer.text


def finals(out: Path, ranks: int) -> list[list[float]]:
    return [json.loads((out / f"final-{rank}").read_text()) for rank in range(ranks)]


def number(path: Path) -> int:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return -1


def wait_for(what: str, done: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}: not reached in {timeout:.0f}s")


def resumed_at(logs: str, rank: int, attempt: int) -> int:
    """The step the log says ``rank`` resumed at in ``attempt``."""
    start = f"rank {rank} resumes at step "
    end = f" (attempt {attempt})"
    for line in logs.splitlines():
        if start in line and line.endswith(end):
            return int(line.split(start)[1].split(" ")[0])
    raise AssertionError(f"no '{start}... {end}' in the logs:\n{logs[-3000:]}")


def succeeded(server: ServerProcess, name: str, timeout: float) -> dict[str, Any]:
    """The job once Succeeded; otherwise the failure names its phase, status and log's tail."""
    deadline = time.monotonic() + timeout
    found: dict[str, Any] = {}
    while time.monotonic() < deadline:
        found = server.job(name)
        phase = (found.get("status") or {}).get("phase")
        if phase == "Succeeded":
            return found
        if phase in ("Failed", "Cancelled"):
            break
        time.sleep(0.5)
    logs = server.cli("logs", f"job/{name}", "-t", "acme", check=False).stdout
    raise AssertionError(f"job {name}: {found.get('status')}\n{logs[-4000:]}")


# --- the cases every backend runs (test_pytorch_local.py, _slurm.py, _ray.py) ----------------


def check_ddp_ends_with_equal_parameters(
    server: ServerProcess, python: Path, steps: int, timeout: float
) -> list[float]:
    """A 2-task DDP job by the platform's variables (env://) succeeds and both ranks hold the
    same parameters; those parameters."""
    out, script = workspace()
    apply(server, job("ddp", [str(python), str(script), "--steps", str(steps), "--out", str(out)]))
    succeeded(server, "ddp", timeout)
    first, second = finals(out, 2)
    assert first == second
    return first


def check_torchrun_across_two_tasks_ends_equal(
    server: ServerProcess, python: Path, timeout: float
) -> None:
    """torchrun with one node per task, from the platform's variables, succeeds with equal
    parameters on both ranks."""
    out, script = workspace()
    apply(server, job("torchrun", torchrun_across_tasks(python, script, out)))
    succeeded(server, "torchrun", timeout)
    first, second = finals(out, 2)
    assert first == second


def check_killed_rank_restarts_the_gang_from_its_checkpoint(
    server: ServerProcess, python: Path
) -> None:
    """A rank SIGKILLed mid-training restarts the whole gang (restartPolicy OnFailure of the
    job), which resumes from the newest checkpoint written at a relative path. The tasks run
    on this machine on every backend here, so the test kills the rank's process itself."""
    out, script = workspace()
    command = [str(python), str(script), "--steps", "300", "--step-seconds", "0.02"]
    command += ["--checkpoint-every", "25", "--out", str(out)]
    gang = "  restartPolicy: OnFailure\n  backoffLimit: 2\n"
    apply(server, job("killed", command, extra=gang))
    wait_for("rank 1 past step 110", lambda: number(out / "progress-1-0") >= 110, 240)
    os.kill(number(out / "pid-1-0"), signal.SIGKILL)
    killed_at = number(out / "progress-1-0")
    done = succeeded(server, "killed", 300)
    assert done["status"]["restarts"] == 1
    assert [t["restarts"] for t in done["status"]["tasks"]] == [1, 1]
    logs = server.cli("logs", "job/killed", "-t", "acme").stdout
    steps = {resumed_at(logs, rank, 1) for rank in (0, 1)}
    assert len(steps) == 1, logs[-3000:]  # both ranks resume at the same step
    (step,) = steps
    # the newest checkpoint before the kill (one behind at most, if the kill cut a write)
    assert step % 25 == 0 and killed_at - 50 <= step <= killed_at, (step, killed_at)
    first, second = finals(out, 2)
    assert first == second


def check_preempted_job_resumes_after_its_preemptor_ends(
    server: ServerProcess, python: Path, *, task_cpu: str, preemptor_cpu: str
) -> None:
    """A low-priority 2-task job (``task_cpu`` each) is preempted by a critical one
    (``preemptor_cpu``, sized by the caller to need the job's room) and resumes after it ends,
    losing at most the steps since its last checkpoint."""
    out, script = workspace()
    command = [str(python), str(script), "--steps", "400", "--step-seconds", "0.02"]
    command += ["--checkpoint-every", "25", "--out", str(out)]
    apply(server, job("victim", command, cpu=task_cpu, extra="  priority: low\n"))
    wait_for("the victim past step 100", lambda: number(out / "progress-0-0") >= 100, 240)
    sleeper = ["/bin/sleep", "3"]
    critical = "  priority: critical\n"
    apply(server, job("preemptor", sleeper, replicas=1, cpu=preemptor_cpu, extra=critical))
    server.wait_phase("preemptor", "Succeeded", timeout=120)
    done = succeeded(server, "victim", 300)
    assert [t["restarts"] for t in done["status"]["tasks"]] == [1, 1]
    logs = server.cli("logs", "job/victim", "-t", "acme").stdout
    stopped_at = min(number(out / f"progress-{rank}-0") for rank in (0, 1))
    step = resumed_at(logs, 0, 1)
    assert step == resumed_at(logs, 1, 1)
    # lost at most the steps since the last checkpoint (two intervals if a write was cut)
    assert step % 25 == 0 and 0 < stopped_at - step <= 50, (step, stopped_at)
    first, second = finals(out, 2)
    assert first == second


def check_elastic_torchrun_grows_to_three_and_shrinks_to_two(
    server: ServerProcess, python: Path, *, blocker: str, task_cpu: str, urgent: str
) -> None:
    """An elastic torchrun job (minAvailable 1 of 3, ``task_cpu`` each) starts with one task
    while the caller's job ``blocker`` runs, grows to 3 when the blocker is cancelled, and
    shrinks to 2 when the critical job ``urgent`` (a manifest sized to need one elastic
    task's room) takes one back; each worker logs the world size it started in."""
    out, script = workspace()
    command = [torchrun(python), "--nproc-per-node=1", str(script), "--until", str(out / "stop")]
    command += ["--step-seconds", "0.05", "--out", str(out)]
    fast = {"PET_RDZV_CONF": "last_call_timeout=2,join_timeout=300", "PET_MONITOR_INTERVAL": "1"}
    elastic = job(
        "elastic", command, replicas=3, cpu=task_cpu, extra="  minAvailable: 1\n", env=fast
    )
    apply(server, elastic)
    try:
        wait_for("a world of 1", lambda: "1" in worlds(out), 180)
        server.cli("cancel", f"job/{blocker}", "-t", "acme")
        wait_for("a world of 3", lambda: "3" in worlds(out), 240)
        apply(server, urgent)
        server.wait_phase("urgent", "Running", timeout=120)
        seen = len(worlds(out))
        wait_for("a world of 2", lambda: "2" in worlds(out)[seen:], 240)
        sizes = worlds(out)
        assert sizes.index("1") < sizes.index("3") < seen <= len(sizes) - 1
    finally:
        (out / "stop").write_text("")
        for name in ("elastic", "urgent", blocker):
            server.cli("cancel", f"job/{name}", "-t", "acme", check=False)
