"""Real PyTorch training (CPU, gloo) through the API on the local backend (`aipaas up`, tasks
run as the tenant's user): DDP by the platform's variables, torchrun across two tasks, a rank
killed mid-training restarting its gang from a checkpoint at a relative path, a preempted job
resuming after its preemptor, and elastic torchrun growing from 1 to 3 tasks and shrinking to
2. The tests' own PyTorch (model_venv.py) is made when absent; they skip only when pip cannot
install it, and say so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytorch_jobs import (
    apply,
    finals,
    job,
    number,
    resumed_at,
    succeeded,
    torch_python,
    torchrun,
    torchrun_across_tasks,
    wait_for,
    workspace,
    worlds,
)
from server_process import SETUP, ServerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def python() -> Path:
    return torch_python()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("torch") / "data", verb="up").start()
    apply(process, SETUP)
    yield process
    process.close()


def test_ddp_by_the_platforms_variables_ends_with_equal_parameters(
    python: Path, server: ServerProcess
) -> None:
    out, script = workspace()
    apply(server, job("ddp", [str(python), str(script), "--steps", "150", "--out", str(out)]))
    succeeded(server, "ddp", 240)
    first, second = finals(out, 2)
    assert first == second
    assert first != finals_untrained(python)


def finals_untrained(python: Path) -> list[float]:
    """The parameters before training (the script's seed), to tell that training moved them."""
    code = (
        "import torch, json; torch.manual_seed(0); m = torch.nn.Linear(16, 1); "
        "print(json.dumps([float(v) for p in m.parameters() for v in p.detach().flatten()]))"
    )
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    values: list[float] = json.loads(done.stdout)
    return values


def test_torchrun_across_two_tasks_from_the_platforms_variables(
    python: Path, server: ServerProcess
) -> None:
    out, script = workspace()
    command = torchrun_across_tasks(python, script, out)
    apply(server, job("torchrun", command))
    succeeded(server, "torchrun", 240)
    first, second = finals(out, 2)
    assert first == second


def test_a_killed_rank_restarts_the_gang_from_its_checkpoint(
    python: Path, server: ServerProcess
) -> None:
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


def test_a_preempted_job_resumes_after_its_preemptor_ends(
    python: Path, server: ServerProcess
) -> None:
    out, script = workspace()
    command = [str(python), str(script), "--steps", "400", "--step-seconds", "0.02"]
    command += ["--checkpoint-every", "25", "--out", str(out)]
    # 2 tasks x 3 CPUs of the server's 8: the preemptor's 4 CPUs need this job's room
    apply(server, job("victim", command, cpu="3", extra="  priority: low\n"))
    wait_for("the victim past step 100", lambda: number(out / "progress-0-0") >= 100, 240)
    sleeper = ["/bin/sleep", "3"]
    apply(server, job("preemptor", sleeper, replicas=1, cpu="4", extra="  priority: critical\n"))
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


def test_elastic_torchrun_grows_to_three_and_shrinks_to_two(
    python: Path, server: ServerProcess
) -> None:
    out, script = workspace()
    # 6 of the server's 8 CPUs taken: one elastic task (2 CPUs) fits
    apply(server, job("blocker", ["/bin/sleep", "600"], replicas=1, cpu="6"))
    server.wait_phase("blocker", "Running", timeout=60)
    command = [torchrun(python), "--nproc-per-node=1", str(script), "--until", str(out / "stop")]
    command += ["--step-seconds", "0.05", "--out", str(out)]
    fast = {"PET_RDZV_CONF": "last_call_timeout=2,join_timeout=300", "PET_MONITOR_INTERVAL": "1"}
    apply(
        server,
        job("elastic", command, replicas=3, cpu="2", extra="  minAvailable: 1\n", env=fast),
    )
    try:
        wait_for("a world of 1", lambda: "1" in worlds(out), 180)
        server.cli("cancel", "job/blocker", "-t", "acme")
        wait_for("a world of 3", lambda: "3" in worlds(out), 240)
        # 6 of 8 CPUs are the job's: a critical job of 4 takes back one elastic task
        urgent = ["/bin/sleep", "600"]
        apply(server, job("urgent", urgent, replicas=1, cpu="4", extra="  priority: critical\n"))
        server.wait_phase("urgent", "Running", timeout=120)
        seen = len(worlds(out))
        wait_for("a world of 2", lambda: "2" in worlds(out)[seen:], 240)
        sizes = worlds(out)
        assert sizes.index("1") < sizes.index("3") < seen <= len(sizes) - 1
    finally:
        (out / "stop").write_text("")
        for name in ("elastic", "urgent", "blocker"):
            server.cli("cancel", f"job/{name}", "-t", "acme", check=False)
