"""Real PyTorch training (CPU, gloo) through the API on the Slurm backend (real daemons:
slurm_cluster.py, two nodes on this machine): DDP by the platform's variables, torchrun across two
tasks, PyTorch Lightning, whose own SLURM detection gives each task its own global rank, a rank
killed mid-training restarting its gang from a checkpoint at a relative path (each task's working
directory outlives its attempts), a preempted job resuming after its preemptor, and elastic torchrun
growing from 1 to 3 tasks and shrinking to 2. The tests' own PyTorch (tests/support/model_venv.py)
and Lightning (lightning_venv.py) are made when absent; the tests skip only when pip cannot install
them, or Slurm is not installed, and say so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration import lightning_venv
from tests.integration.pytorch_jobs import (
    apply,
    check_elastic_torchrun_grows_to_three_and_shrinks_to_two,
    check_killed_rank_restarts_the_gang_from_its_checkpoint,
    check_preempted_job_resumes_after_its_preemptor_ends,
    finals,
    job,
    succeeded,
    torch_python,
    torchrun_across_tasks,
    workspace,
)
from tests.integration.slurm_cluster import SlurmCluster, slurm_cluster
from tests.support import model_venv
from tests.support.server_process import SETUP, ServerProcess

__all__ = ["slurm_cluster"]  # the fixture, used by name

pytestmark = pytest.mark.slow
LIGHTNING = Path(__file__).resolve().parents[2] / "examples" / "pytorch" / "lightning_ranks.py"


@pytest.fixture(scope="module")
def python() -> Path:
    return torch_python()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, slurm_cluster: SlurmCluster
) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("torch-slurm") / "data",
        backend="slurm",
        extra=["--slurm-conf", str(slurm_cluster.conf)],
    ).start()
    apply(process, SETUP)
    yield process
    process.close()


def test_ddp_by_the_platforms_variables_on_slurm(python: Path, server: ServerProcess) -> None:
    out, script = workspace()
    command = [str(python), str(script), "--steps", "100", "--out", str(out)]
    apply(server, job("ddp", command))
    succeeded(server, "ddp", 300)
    first, second = finals(out, 2)
    assert first == second


def test_torchrun_across_two_tasks_on_slurm(python: Path, server: ServerProcess) -> None:
    out, script = workspace()
    command = torchrun_across_tasks(python, script, out)
    apply(server, job("torchrun", command))
    succeeded(server, "torchrun", 300)
    first, second = finals(out, 2)
    assert first == second


def test_lightning_gives_each_slurm_task_its_own_global_rank(server: ServerProcess) -> None:
    try:
        python = lightning_venv.ensure()
    except model_venv.Unavailable as err:
        pytest.skip(f"PyTorch Lightning could not be installed by pip: {err}")
    out, _ = workspace()
    script = out / "lightning_ranks.py"
    script.write_text(LIGHTNING.read_text())
    apply(server, job("lightning", [str(python), str(script), str(out)]))
    succeeded(server, "lightning", 300)
    seen = [json.loads((out / f"lightning-{rank}").read_text()) for rank in (0, 1)]
    assert [s["global_rank"] for s in seen] == [0, 1]
    assert [s["slurm_procid"] for s in seen] == ["0", "1"]
    assert all(s["detected"] and s["environment"] == "SLURMEnvironment" for s in seen)
    assert all(s["world_size"] == 2 for s in seen)
    assert seen[0]["params"] == seen[1]["params"]  # DDP kept them equal


def test_a_killed_rank_restarts_the_gang_from_its_checkpoint_on_slurm(
    python: Path, server: ServerProcess
) -> None:
    check_killed_rank_restarts_the_gang_from_its_checkpoint(
        server, python
    )  # the nodes are this machine


def test_a_preempted_job_resumes_after_its_preemptor_ends_on_slurm(
    python: Path, server: ServerProcess, slurm_cluster: SlurmCluster
) -> None:
    # each task takes a whole node's CPUs: the preemptor's task needs one of the victim's nodes
    cpus = str(node_cpus(slurm_cluster))
    check_preempted_job_resumes_after_its_preemptor_ends(
        server, python, task_cpu=cpus, preemptor_cpu=cpus
    )


def node_cpus(cluster: SlurmCluster) -> int:
    """The CPUs of each node of the test cluster (all alike: the machine's)."""
    return int(cluster.run("sinfo", "-h", "-N", "-n", "n1", "-o", "%c").split()[0])


def test_elastic_torchrun_grows_to_three_and_shrinks_to_two_on_slurm(
    python: Path, server: ServerProcess, slurm_cluster: SlurmCluster
) -> None:
    # two nodes: room for four elastic tasks of half a node each; the blocker (a whole node
    # and a half) leaves room for one; once the job holds three, one half node is free and a
    # critical job of two halves takes back one elastic task
    cpus = node_cpus(slurm_cluster)
    half = f"{cpus * 500}m"
    blocker = job("blocker", ["/bin/sleep", "600"], replicas=1, cpu=str(cpus))
    blocker += "    - name: v\n      command: [/bin/sleep, '600']\n"
    blocker += f"      resources: {{cpu: {half}, memory: 1Gi}}\n"
    apply(server, blocker)
    server.wait_phase("blocker", "Running", timeout=60)
    urgent = job("urgent", ["/bin/sleep", "600"], cpu=half, extra="  priority: critical\n")
    check_elastic_torchrun_grows_to_three_and_shrinks_to_two(
        server, python, blocker="blocker", task_cpu=half, urgent=urgent
    )
