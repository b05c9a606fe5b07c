"""``spec.nodeSelector``: a job goes only to nodes with all its labels (a pool, or one backend
of a server that drives several); one no node matches waits and says which labels; a job of
the same shape without a selector is not held back by that refusal (the allocate action's memo
of gangs that found no room keys on the engine's constraint, not on the shape alone). The
``--backend local,slurm`` names are checked here; the real Slurm + local server is
tests/integration/test_multi_backend.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from aipaas.api.job import Job
from aipaas.api.registry import load_objects
from aipaas.backends.names import check_names
from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from aipaas.errors import InvalidObject
from aipaas.settings import Settings
from tests.support.ctl_world import World

CLUSTER = """nodes:
  - {name: a, count: 1, cpu: 4, memory: 16Gi, labels: {pool: blue}}
  - {name: b, count: 1, cpu: 4, memory: 16Gi, labels: {pool: green}}
"""
TASKS = """    - name: w
      command: [train]
      resources: {cpu: 4, memory: 1Gi}
"""


def selector(labels: str) -> str:
    return f"  nodeSelector: {labels}\n"


def node_of(world: World, name: str) -> str | None:
    status = world.job(name).status
    return status.tasks[0].node if status and status.tasks else None


def test_jobs_go_only_to_nodes_with_their_labels(world: World, tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    clock = VirtualClock()
    backend = SimBackend(tmp_path / "run", load_cluster(path), clock, default_duration=600)
    world.setup()
    world.submit(
        "green",
        TASKS,
        extra=selector("{pool: green}"),
        annotations="{sim.aipaas.dev/duration: '600'}",
    )
    world.submit(
        "purple",
        TASKS,
        extra=selector("{pool: purple}"),
        annotations="{sim.aipaas.dev/duration: '600'}",
    )
    world.submit("any", TASKS, annotations="{sim.aipaas.dev/duration: '600'}")
    ctl = world.controller(backend, clock)
    ctl.run_cycle()
    ctl.run_cycle()
    assert node_of(world, "green") == "b"
    assert node_of(world, "any") == "a"  # the same shape as purple's, not refused with it
    assert world.phase("purple") == "Pending"
    status = world.job("purple").status
    # The framework's diagnosis, the words ``aipaas simulate`` gives for the same job.
    assert status is not None
    assert "2 node(s) didn't match the pod's node selector or affinity" in status.message


def test_node_selector_and_backend_names_are_checked() -> None:
    text = """apiVersion: aipaas/v1
kind: Job
metadata: {name: x, tenant: acme}
spec:
  nodeSelector: {aipaas.dev/backend: "not a value"}
  tasks: [{name: w, command: [x]}]
"""
    with pytest.raises(InvalidObject, match=r"spec\.nodeSelector"):
        load_objects(text)
    (job,) = load_objects(text.replace('"not a value"', "slurm"))
    assert isinstance(job, Job) and job.spec.node_selector == {"aipaas.dev/backend": "slurm"}
    assert check_names("local, slurm,ray") == ["local", "slurm", "ray"]
    for wrong in ("local,sim", "slurm,slurm", "cloud"):
        with pytest.raises(ValueError):
            check_names(wrong)
    assert Settings(backend="local,slurm").backend == "local,slurm"
    with pytest.raises(ValueError, match="side by side"):
        Settings(backend="local,demo")
