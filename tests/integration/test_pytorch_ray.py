"""Real PyTorch training (CPU, gloo) through the API on the Ray backend: a real `aipaas server
--backend ray --ray-address ADDR` on a real Ray cluster (ray_cluster.py: a head and three
nodes of 8 CPUs on this host). DDP by the platform's variables and torchrun across two tasks
from ``$(MASTER_ADDR)`` and friends (expanded by the Ray backend after it put the node's
address in MASTER_ADDR) end with equal parameters on every rank; a rank killed mid-training
restarts its gang, which resumes from a checkpoint at a relative path (the task's directory
outlives its attempts); a preempted job resumes after its preemptor ends, losing at most the
steps since its last checkpoint; elastic torchrun grows from 1 to 3 tasks and shrinks to 2.
The tests' own PyTorch (tests/support/model_venv.py) is made when absent; they skip only when
Ray is not installed or pip cannot install PyTorch, and say so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.pytorch_jobs import (
    apply,
    check_ddp_ends_with_equal_parameters,
    check_elastic_torchrun_grows_to_three_and_shrinks_to_two,
    check_killed_rank_restarts_the_gang_from_its_checkpoint,
    check_preempted_job_resumes_after_its_preemptor_ends,
    check_torchrun_across_two_tasks_ends_equal,
    job,
    torch_python,
)
from tests.integration.ray_cluster import RayCluster, ray_cluster
from tests.support.server_process import SETUP, ServerProcess

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
    check_ddp_ends_with_equal_parameters(server, python, steps=100, timeout=300)


def test_torchrun_across_two_tasks_on_ray(python: Path, server: ServerProcess) -> None:
    check_torchrun_across_two_tasks_ends_equal(server, python, timeout=300)


def test_a_killed_rank_restarts_the_gang_from_its_checkpoint_on_ray(
    python: Path, server: ServerProcess
) -> None:
    check_killed_rank_restarts_the_gang_from_its_checkpoint(
        server, python
    )  # the nodes are this machine


def test_a_preempted_job_resumes_after_its_preemptor_ends_on_ray(
    python: Path, server: ServerProcess
) -> None:
    # a blocker fills one node and the victim's two tasks the other two: the preemptor's
    # task needs a node of the victim's
    apply(server, job("blocker", ["/bin/sleep", "600"], replicas=1, cpu=NODE))
    server.wait_phase("blocker", "Running", timeout=120)
    try:
        check_preempted_job_resumes_after_its_preemptor_ends(
            server, python, task_cpu=NODE, preemptor_cpu=NODE
        )
    finally:
        server.cli("cancel", "job/blocker", "-t", "acme", check=False)


def test_elastic_torchrun_grows_to_three_and_shrinks_to_two_on_ray(
    python: Path, server: ServerProcess
) -> None:
    # each elastic task fills a node: a job on two of the three leaves room for one; once the
    # job holds every node, a critical job of one node takes back one elastic task
    apply(server, job("busy", ["/bin/sleep", "600"], cpu=NODE))
    server.wait_phase("busy", "Running", timeout=120)
    urgent = job(
        "urgent", ["/bin/sleep", "600"], replicas=1, cpu=NODE, extra="  priority: critical\n"
    )
    check_elastic_torchrun_grows_to_three_and_shrinks_to_two(
        server, python, blocker="busy", task_cpu=NODE, urgent=urgent
    )
