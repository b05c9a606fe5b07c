"""Placement with data in the live controller (issue 13): a job that names a dataset goes to
the node whose cache holds it (whichever of two equal nodes that is); another tenant's copy of
a dataset with the same name does not draw it."""

from __future__ import annotations

from pathlib import Path

import pytest

from aipaas.api.data import Dataset, DatasetStatus, NodeCacheStatus
from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from aipaas.store import Store
from tests.support.ctl_world import World

CLUSTER = """nodes:
  - {name: a, count: 1, cpu: 4, memory: 16Gi}
  - {name: b, count: 1, cpu: 4, memory: 16Gi}
"""
TASKS = """    - name: w
      command: [train]
      resources: {cpu: 4, memory: 1Gi}
"""
GLOBEX = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: globex}
spec: {quota: {cpu: 64, memory: 512Gi}}
"""


def _dataset(world: World, tenant: str, cached_on: str | None) -> None:
    world.service.apply_text(
        f"""apiVersion: aipaas/v1
kind: Dataset
metadata: {{name: imagenet, tenant: {tenant}}}
spec: {{source: s3://bucket/imagenet, size: 10Gi}}
"""
    )
    if cached_on is None:
        return
    stored = world.store.get("Dataset", tenant, "imagenet")
    assert isinstance(stored, Dataset)
    copy = NodeCacheStatus(node=cached_on, bytes=10 << 30, complete=True, files=1)
    world.store.update_status(
        stored, DatasetStatus(phase="Cached", size_bytes=10 << 30, nodes=[copy])
    )


def _placed(world: World, tmp_path: Path) -> str | None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    clock = VirtualClock()
    backend = SimBackend(tmp_path / "run", load_cluster(path), clock, default_duration=600)
    world.submit(
        "train",
        TASKS,
        extra="  datasets: [{name: imagenet, mountPath: /data}]\n",
        annotations="{sim.aipaas.dev/duration: '600'}",
    )
    ctl = world.controller(backend, clock)
    ctl.run_cycle()
    ctl.run_cycle()
    status = world.job("train").status
    return status.tasks[0].node if status and status.tasks else None


@pytest.mark.parametrize("holder", ["a", "b"])
def test_a_job_goes_to_the_node_holding_its_data(world: World, tmp_path: Path, holder: str) -> None:
    world.setup()
    _dataset(world, "acme", cached_on=holder)
    assert _placed(world, tmp_path) == holder


def _fresh_world(tmp_path: Path) -> World:
    tmp_path.mkdir(parents=True)
    world = World(Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}"), tmp_path)
    world.setup()
    world.service.apply_text(GLOBEX)
    _dataset(world, "acme", cached_on=None)
    return world


def test_another_tenants_copy_does_not_draw_a_job(tmp_path: Path) -> None:
    placed = {}
    for globex_copy in (None, "a", "b"):
        world = _fresh_world(tmp_path / str(globex_copy))
        try:
            if globex_copy is not None:
                _dataset(world, "globex", cached_on=globex_copy)
            placed[globex_copy] = _placed(world, world.tmp)
        finally:
            world.store.close()
    assert placed[None] in {"a", "b"}
    assert placed["a"] == placed["b"] == placed[None]
