"""What the PyTorch workload tests share (test_pytorch_local.py, test_pytorch_slurm.py): the
tests' own PyTorch (model_venv.py: skipped only when pip cannot install it, saying so), the
training script (examples/pytorch/train.py) copied where a task's user can read it, Job
manifests that start it by the platform's variables or under torchrun, and what the script
leaves in its output folder, read back."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import model_venv
import pytest
from server_process import ServerProcess, shared_dir

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
