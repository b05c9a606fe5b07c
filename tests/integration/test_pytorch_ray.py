"""Real PyTorch training (CPU, gloo) on the Ray backend (a real Ray cluster: ray_cluster.py,
driven by the controller in this process as the other Ray tests are): a 2-task DDP job by the
platform's variables, and torchrun across 2 tasks from ``$(MASTER_ADDR)`` and friends, which
the Ray backend expands after putting the node's address in MASTER_ADDR; both end with equal
parameters on every rank. Skipped only when Ray is not installed or pip cannot install the
tests' PyTorch, saying so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytorch_jobs import finals, torch_python, torchrun, workspace
from ray_cluster import RayCluster, World, cycle_until, ray_cluster, world

from aipaas.backends.base import Backend

pytest.importorskip("ray", reason="ray is not installed (the ray extra; scripts/setup.sh)")

__all__ = ["ray_cluster", "world"]  # fixtures, used by name
pytestmark = pytest.mark.slow


@pytest.fixture
def backend(ray_cluster: RayCluster, tmp_path: Path) -> Iterator[Backend]:
    from aipaas.backends.ray.registry import ray_backend

    made = ray_backend(tmp_path / "run", ray_cluster.address)
    yield made
    made.close()


def tasks(command: list[str]) -> str:
    return (
        "    - name: w\n      replicas: 2\n"
        f"      command: {json.dumps(command)}\n"
        "      resources: {cpu: 1, memory: 1Gi}\n"
    )


def finish(world: World, backend: Backend, name: str) -> None:
    controller = world.controller(backend)
    ended = ("Succeeded", "Failed", "Cancelled")
    cycle_until(controller, lambda: world.phase(name) in ended, timeout=300)
    assert world.phase(name) == "Succeeded", world.job(name).status


def test_ddp_by_the_platforms_variables_on_ray(world: World, backend: Backend) -> None:
    python = torch_python()
    out, script = workspace()
    world.submit("ddp", tasks([str(python), str(script), "--steps", "100", "--out", str(out)]))
    finish(world, backend, "ddp")
    first, second = finals(out, 2)
    assert first == second


def test_torchrun_across_two_tasks_on_ray(world: World, backend: Backend) -> None:
    python = torch_python()
    out, script = workspace()
    command = [
        torchrun(python),
        "--nnodes=$(WORLD_SIZE)",
        "--node-rank=$(RANK)",
        "--nproc-per-node=1",
        "--master-addr=$(MASTER_ADDR)",
        "--master-port=$(MASTER_PORT)",
        str(script),
        "--steps",
        "100",
        "--out",
        str(out),
    ]
    world.submit("torchrun", tasks(command))
    finish(world, backend, "torchrun")
    first, second = finals(out, 2)
    assert first == second
