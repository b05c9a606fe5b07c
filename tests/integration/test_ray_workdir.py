"""On the Ray backend (a real Ray cluster: ray_cluster.py) a task's working directory survives
its restarts: a task that fails after writing a step counter at a relative path resumes from
it in the same AIPAAS_WORKDIR."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from aipaas.backends.base import Backend
from tests.integration.ray_cluster import RayCluster, World, cycle_until, ray_cluster, world

pytest.importorskip("ray", reason="ray is not installed (the ray extra; scripts/setup.sh)")

__all__ = ["ray_cluster", "world"]  # fixtures, used by name
pytestmark = pytest.mark.slow

TRAIN = """
import os, sys
out = sys.argv[1]
step = int(open("step").read()) if os.path.exists("step") else 0
with open(out, "a") as f:
    seen = [os.environ["AIPAAS_ATTEMPT"], str(step), os.environ["AIPAAS_WORKDIR"], os.getcwd()]
    f.write(" ".join(seen) + "\\n")
while step < 4:
    step += 1
    open("step", "w").write(str(step))
    if step == 2 and os.environ["AIPAAS_ATTEMPT"] == "0":
        sys.exit(3)
"""


@pytest.fixture
def backend(ray_cluster: RayCluster, tmp_path: Path) -> Iterator[Backend]:
    from aipaas.backends.ray.registry import ray_backend

    made = ray_backend(tmp_path / "run", ray_cluster.address)
    yield made
    made.close()


def test_a_restarted_ray_task_resumes_from_its_relative_checkpoint(
    world: World, backend: Backend, tmp_path: Path
) -> None:
    controller = world.controller(backend, backoff_seconds=0.05)
    out = tmp_path / "attempts"
    task = (
        "    - name: worker\n"
        f"      command: {json.dumps([sys.executable, '-c', TRAIN, str(out)])}\n"
        "      resources: {cpu: 1, memory: 64Mi}\n"
        "      restartPolicy: OnFailure\n      backoffLimit: 2\n"
    )
    world.submit("resume", task)
    cycle_until(controller, lambda: world.phase("resume") == "Succeeded", timeout=90)
    attempts = [line.split() for line in out.read_text().splitlines()]
    assert [(a[0], a[1]) for a in attempts] == [("0", "0"), ("1", "2")]
    assert attempts[0][2] == attempts[1][2] == attempts[1][3]  # one directory, entered
