"""Real PyTorch training (CPU, gloo) through the API on the Ray backend: a real `aipaas server
--backend ray --ray-address ADDR` on a real Ray cluster (ray_cluster.py: a head and three
nodes of 8 CPUs on this host). DDP by the platform's variables and torchrun across two tasks
from ``$(MASTER_ADDR)`` and friends (expanded by the Ray backend after it put the node's
address in MASTER_ADDR) end with equal parameters on every rank; a rank killed mid-training
restarts its gang, which resumes from a checkpoint at a relative path (the task's directory
outlives its attempts); a preempted job resumes after its preemptor ends, losing at most the
steps since its last checkpoint; elastic torchrun grows from 1 to 3 tasks and shrinks to 2.
The tests' own PyTorch (model_venv.py) is made when absent; they skip only when Ray is not
installed or pip cannot install PyTorch, and say so."""

from __future__ import annotations

import os
import signal
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
from ray_cluster import RayCluster, ray_cluster
from server_process import SETUP, ServerProcess

pytest.importorskip("ray", reason="ray is not installed (the ray extra; scripts/setup.sh)")

__all__ = ["ray_cluster"]  # the fixture, used by name
pytestmark = pytest.mark.slow

#: the CPUs of each of the cluster's three worker nodes (ray_cluster.py): a task asking for
#: as many fills a node, so who has to make room for whom is known
NODE = "8"


@pytest.fixture(scope="module")
def python() -> Path:
    return torch_python()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, ray_cluster: RayCluster
) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("torch-ray") / "data",
        backend="ray",
        extra=["--ray-address", ray_cluster.address],
    ).start()
    apply(process, SETUP)
    yield process
    process.close()


def test_ddp_by_the_platforms_variables_on_ray(python: Path, server: ServerProcess) -> None:
    out, script = workspace()
    command = [str(python), str(script), "--steps", "100", "--out", str(out)]
    apply(server, job("ddp", command))
    succeeded(server, "ddp", 300)
    first, second = finals(out, 2)
    assert first == second


def test_torchrun_across_two_tasks_on_ray(python: Path, server: ServerProcess) -> None:
    out, script = workspace()
    command = torchrun_across_tasks(python, script, out)
    apply(server, job("torchrun", command))
    succeeded(server, "torchrun", 300)
    first, second = finals(out, 2)
    assert first == second


def test_a_killed_rank_restarts_the_gang_from_its_checkpoint_on_ray(
    python: Path, server: ServerProcess
) -> None:
    out, script = workspace()
    command = [str(python), str(script), "--steps", "300", "--step-seconds", "0.02"]
    command += ["--checkpoint-every", "25", "--out", str(out)]
    gang = "  restartPolicy: OnFailure\n  backoffLimit: 2\n"
    apply(server, job("killed", command, extra=gang))
    wait_for("rank 1 past step 110", lambda: number(out / "progress-1-0") >= 110, 240)
    os.kill(number(out / "pid-1-0"), signal.SIGKILL)  # the cluster's nodes are this machine
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


def test_a_preempted_job_resumes_after_its_preemptor_ends_on_ray(
    python: Path, server: ServerProcess
) -> None:
    out, script = workspace()
    # a blocker fills one node and the victim's two tasks the other two: the preemptor's
    # task needs a node of the victim's
    apply(server, job("blocker", ["/bin/sleep", "600"], replicas=1, cpu=NODE))
    server.wait_phase("blocker", "Running", timeout=120)
    command = [str(python), str(script), "--steps", "400", "--step-seconds", "0.02"]
    command += ["--checkpoint-every", "25", "--out", str(out)]
    try:
        apply(server, job("victim", command, cpu=NODE, extra="  priority: low\n"))
        wait_for("the victim past step 100", lambda: number(out / "progress-0-0") >= 100, 240)
        sleeper = ["/bin/sleep", "3"]
        critical = "  priority: critical\n"
        apply(server, job("preemptor", sleeper, replicas=1, cpu=NODE, extra=critical))
        server.wait_phase("preemptor", "Succeeded", timeout=120)
        done = succeeded(server, "victim", 300)
    finally:
        server.cli("cancel", "job/blocker", "-t", "acme", check=False)
    assert [t["restarts"] for t in done["status"]["tasks"]] == [1, 1]
    logs = server.cli("logs", "job/victim", "-t", "acme").stdout
    stopped_at = min(number(out / f"progress-{rank}-0") for rank in (0, 1))
    step = resumed_at(logs, 0, 1)
    assert step == resumed_at(logs, 1, 1)
    # lost at most the steps since the last checkpoint (two intervals if a write was cut)
    assert step % 25 == 0 and 0 < stopped_at - step <= 50, (step, stopped_at)
    first, second = finals(out, 2)
    assert first == second


def test_elastic_torchrun_grows_to_three_and_shrinks_to_two_on_ray(
    python: Path, server: ServerProcess
) -> None:
    out, script = workspace()
    # each elastic task fills a node: a job on two of the three leaves room for one
    apply(server, job("busy", ["/bin/sleep", "600"], cpu=NODE))
    server.wait_phase("busy", "Running", timeout=120)
    command = [torchrun(python), "--nproc-per-node=1", str(script), "--until", str(out / "stop")]
    command += ["--step-seconds", "0.05", "--out", str(out)]
    fast = {"PET_RDZV_CONF": "last_call_timeout=2,join_timeout=300", "PET_MONITOR_INTERVAL": "1"}
    apply(
        server,
        job("elastic", command, replicas=3, cpu=NODE, extra="  minAvailable: 1\n", env=fast),
    )
    try:
        wait_for("a world of 1", lambda: "1" in worlds(out), 180)
        server.cli("cancel", "job/busy", "-t", "acme")
        wait_for("a world of 3", lambda: "3" in worlds(out), 240)
        # every node is the job's: a critical job of one node takes back one elastic task
        urgent = ["/bin/sleep", "600"]
        critical = "  priority: critical\n"
        apply(server, job("urgent", urgent, replicas=1, cpu=NODE, extra=critical))
        server.wait_phase("urgent", "Running", timeout=120)
        seen = len(worlds(out))
        wait_for("a world of 2", lambda: "2" in worlds(out)[seen:], 240)
        sizes = worlds(out)
        assert sizes.index("1") < sizes.index("3") < seen <= len(sizes) - 1
    finally:
        (out / "stop").write_text("")
        for name in ("elastic", "urgent", "busy"):
            server.cli("cancel", f"job/{name}", "-t", "acme", check=False)
