"""Real PyTorch training (CPU, gloo) on the Ray backend (a real Ray cluster: ray_cluster.py,
driven by the controller in this process as the other Ray tests are): a 2-task DDP job by the
platform's variables, and torchrun across 2 tasks from ``$(MASTER_ADDR)`` and friends, which
the Ray backend expands after putting the node's address in MASTER_ADDR; both end with equal
parameters on every rank. Skipped only when Ray is not installed or pip cannot install the
tests' PyTorch, saying so."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytorch_jobs import (
    finals,
    number,
    resumed_at,
    torch_python,
    torchrun_across_tasks,
    workspace,
)
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
    command = torchrun_across_tasks(python, script, out)
    world.submit("torchrun", tasks(command))
    finish(world, backend, "torchrun")
    first, second = finals(out, 2)
    assert first == second


def test_a_killed_rank_restarts_the_gang_from_its_checkpoint_on_ray(
    world: World, backend: Backend
) -> None:
    python = torch_python()
    out, script = workspace()
    command = [str(python), str(script), "--steps", "300", "--step-seconds", "0.02"]
    command += ["--checkpoint-every", "25", "--out", str(out)]
    gang = "  restartPolicy: OnFailure\n  backoffLimit: 2\n"
    world.submit("killed", tasks(command) + gang)  # the job's keys after its tasks
    controller = world.controller(backend, backoff_seconds=0.5)
    cycle_until(controller, lambda: number(out / "progress-1-0") >= 110, timeout=240)
    os.kill(number(out / "pid-1-0"), signal.SIGKILL)
    killed_at = number(out / "progress-1-0")
    ended = ("Succeeded", "Failed", "Cancelled")
    cycle_until(controller, lambda: world.phase("killed") in ended, timeout=300)
    status = world.job("killed").status
    logs = "".join(p.read_text()[-3000:] for p in world.tmp.rglob("w-*.log"))
    assert status is not None and status.phase.value == "Succeeded", logs
    assert status.restarts == 1
    steps = {resumed_at(logs, rank, 1) for rank in (0, 1)}
    assert len(steps) == 1, steps  # both ranks resume at the same checkpoint
    (step,) = steps
    assert step % 25 == 0 and killed_at - 50 <= step <= killed_at, (step, killed_at)
    first, second = finals(out, 2)
    assert first == second


def test_a_preempted_job_resumes_after_its_preemptor_ends_on_ray(
    world: World, backend: Backend
) -> None:
    python = torch_python()
    out, script = workspace()
    controller = world.controller(backend, backoff_seconds=0.5)
    # the three GPU nodes have 8 CPUs each: a blocker takes one, the training job the others
    blocker = "    - name: w\n      command: [/bin/sleep, '600']\n      resources: {cpu: 8}\n"
    world.submit("blocker", blocker)
    cycle_until(controller, lambda: world.phase("blocker") == "Running", timeout=120)
    command = [str(python), str(script), "--steps", "400", "--step-seconds", "0.02"]
    command += ["--checkpoint-every", "25", "--out", str(out)]
    world.submit("victim", whole_nodes(command) + "  priority: low\n")
    cycle_until(controller, lambda: number(out / "progress-0-0") >= 100, timeout=240)
    urgent = "    - name: w\n      command: [/bin/sleep, '3']\n      resources: {cpu: 8}\n"
    world.submit("urgent", urgent + "  priority: critical\n")
    ended = ("Succeeded", "Failed", "Cancelled")
    try:
        cycle_until(controller, lambda: world.phase("victim") in ended, timeout=300)
    finally:
        world.service.cancel("blocker", "acme")
    assert world.phase("urgent") == "Succeeded"
    status = world.job("victim").status
    logs = "".join(p.read_text()[-3000:] for p in world.tmp.rglob("w-*.log"))
    assert status is not None and status.phase.value == "Succeeded", logs
    assert [t.restarts for t in status.tasks] == [1, 1]
    stopped_at = min(number(out / f"progress-{rank}-0") for rank in (0, 1))
    step = resumed_at(logs, 0, 1)
    assert step == resumed_at(logs, 1, 1)
    # lost at most the steps since the last checkpoint (two intervals if a write was cut)
    assert step % 25 == 0 and 0 < stopped_at - step <= 50, (step, stopped_at)
    first, second = finals(out, 2)
    assert first == second


def whole_nodes(command: list[str]) -> str:
    """Two tasks of 8 CPUs: each fills a GPU node of the Ray cluster."""
    return (
        "    - name: w\n      replicas: 2\n"
        f"      command: {json.dumps(command)}\n"
        "      resources: {cpu: 8, memory: 1Gi}\n"
    )
