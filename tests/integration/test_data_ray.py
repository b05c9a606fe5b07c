"""Datasets on the Ray backend: a real Ray cluster (ray_cluster.py: a head and three nodes on
this host), the real Ray backend (its driver process, detached actors) and a real S3 API
(moto's server, s3_server.py), driven by a controller with the dataset extension.

A two-task job pinned to ray-gpu-a stages the dataset into that node's cache inside its actors
and checks its checksum; a second job there reads it with no request reaching S3 (counted by
the server); the node reports its cache with its inventory; a warm on demand runs the copier
as a Ray task on the node asked, and only there.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aipaas.api.data import Dataset
from aipaas.backends.base import Backend
from aipaas.backends.datasets import CACHE_ANNOTATION, CACHE_STATE_SECONDS, dataset_caches
from aipaas.backends.ray.registry import ray_backend
from aipaas.clock import isoformat
from aipaas.controller.cycle import Controller
from aipaas.controller.datasets import WARM_NODES, WARM_REQUESTED, DatasetExtension
from tests.integration.data_nodes import BUCKET, OBJECTS, READER, SIZE, manifests
from tests.integration.ray_cluster import RayCluster, World, cycle_until, ray_cluster, world
from tests.integration.s3_server import S3Server
from tests.support.server_process import free_port

__all__ = ["ray_cluster", "world"]  # fixtures, used by name

NODE = "ray-gpu-a"


def _job(name: str, out: Path) -> str:
    return json.dumps(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Job",
            "metadata": {"name": name, "tenant": "acme"},
            "spec": {
                "queue": "research",
                "nodeSelector": {"aipaas.dev/node": NODE},
                "datasets": [{"name": "train", "mountPath": "/data/train"}],
                "tasks": [
                    {
                        "name": "reader",
                        "replicas": 2,
                        "command": [sys.executable, "-c", READER.format(out=str(out))],
                        "resources": {"cpu": 1, "memory": "128Mi"},
                    }
                ],
            },
        }
    )


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(free_port(), tmp_path_factory.mktemp("moto") / "moto.log").start()
    yield server
    server.stop()


@pytest.fixture
def backend(ray_cluster: RayCluster, tmp_path: Path) -> Iterator[Backend]:
    made = ray_backend(tmp_path / "run", ray_cluster.address)
    yield made
    made.close()


def _controller(world: World, backend: Backend) -> Controller:
    return world.controller(backend, extensions=[DatasetExtension(period_seconds=0.2)])


def _status(world: World, name: str) -> Any:
    found = world.store.get("Dataset", "acme", name)
    assert isinstance(found, Dataset)
    return found.status


def _node_cache_summary(backend: Backend) -> dict[str, Any]:
    """The node's cache totals as the inventory reports them, once they count a load (they are
    read again at most every CACHE_STATE_SECONDS)."""
    deadline = time.monotonic() + CACHE_STATE_SECONDS + 60  # a loaded machine reads it late
    while True:
        node = next(n for n in backend.inventory().nodes if n.name == NODE)
        cache: dict[str, Any] = json.loads(node.annotations[CACHE_ANNOTATION])
        if cache["usedBytes"] >= SIZE or time.monotonic() > deadline:
            return cache
        time.sleep(0.5)


def test_ray_actors_read_a_dataset_through_their_nodes_cache(
    world: World, backend: Backend, s3: S3Server, tmp_path: Path
) -> None:
    expected = s3.upload(BUCKET, OBJECTS)
    world.service.apply_text(manifests(s3.url))
    controller = _controller(world, backend)
    s3.forget()

    world.service.apply_text(_job("first", tmp_path))
    cycle_until(controller, lambda: world.phase("first") == "Succeeded", timeout=90)
    assert (tmp_path / "first-0").read_text() == expected
    assert (tmp_path / "first-1").read_text() == expected
    gets = [path for method, path in s3.requests() if method == "GET" and "part-" in path]
    assert gets, "the first job's data came from S3"
    cycle_until(
        controller, lambda: (s := _status(world, "train")) and s.phase == "Cached", timeout=90
    )
    status = _status(world, "train")
    assert status.size_bytes == SIZE
    assert [(n.node, n.complete) for n in status.nodes] == [(NODE, True)]
    cache = _node_cache_summary(backend)
    assert cache["usedBytes"] >= SIZE and cache["complete"] == 1

    s3.forget()
    world.service.apply_text(_job("second", tmp_path))
    cycle_until(controller, lambda: world.phase("second") == "Succeeded", timeout=90)
    assert (tmp_path / "second-0").read_text() == expected
    assert (tmp_path / "second-1").read_text() == expected
    assert s3.requests() == [], "the second job was served from the node's cache alone"
    cycle_until(
        controller,
        lambda: _status(world, "train").hits + _status(world, "train").misses == 4,
        timeout=90,
    )
    status = _status(world, "train")
    assert status.bytes_from_source == SIZE and status.hits >= 3


def test_warm_on_demand_loads_on_the_ray_node_asked(
    world: World, backend: Backend, s3: S3Server
) -> None:
    s3.upload(BUCKET, OBJECTS)
    world.service.apply_text(manifests(s3.url))
    controller = _controller(world, backend)
    controller.run_cycle()  # the inventory: the nodes that have caches
    current = world.store.get("Dataset", "acme", "labels")
    annotations = {
        **current.metadata.annotations,
        WARM_NODES: "ray-gpu-b",
        WARM_REQUESTED: isoformat(world.store.clock.now()),
    }
    meta = current.metadata.model_copy(update={"annotations": annotations})
    world.store.update(current.model_copy(update={"metadata": meta}))
    cycle_until(
        controller, lambda: (s := _status(world, "labels")) and s.phase == "Cached", timeout=90
    )
    status = _status(world, "labels")
    assert [(n.node, n.complete) for n in status.nodes] == [("ray-gpu-b", True)]
    assert status.size_bytes == len(OBJECTS["train/nested/labels.txt"])
    caches = dataset_caches(backend)
    assert caches is not None
    held = {(c.node, c.key.split("/")[1].rsplit("-", 1)[0]) for c in caches.cached_datasets()}
    assert ("ray-gpu-b", "labels") in held and ("ray-gpu-a", "labels") not in held
