"""A throwaway Ray cluster for the Ray backend's tests: one head and three GPU nodes on this
host (Ray's own ``cluster_utils``; fake GPUs: Ray hands out ids, nothing touches a device), and
the controller world (a store with a tenant and its queue) the tests drive.

Started once for the module (about 15 s on two cores); tests that remove a node go last.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from aipaas.api.job import Job
from aipaas.api.tenancy import Role
from aipaas.backends.base import Backend
from aipaas.controller.cycle import Controller
from aipaas.server.service import ObjectService
from aipaas.store import Store
from aipaas.tenancy.principal import Principal

#: The GPU nodes: aipaas names them by their ``aipaas.dev/node`` label.
GPU_NODES = ("ray-gpu-a", "ray-gpu-b", "ray-gpu-c")
GPUS_PER_NODE = 4
SETUP = """
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
spec: {quota: {gpu: 16, cpu: 64, memory: 512Gi}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
"""
ADMIN = Principal("admin", "", Role.PLATFORM_ADMIN)


@dataclass
class RayCluster:
    cluster: Any  # ray.cluster_utils.Cluster
    address: str
    nodes: dict[str, Any] = field(default_factory=dict)  # aipaas name -> Ray's node handle

    def remove(self, name: str) -> None:
        """Take a node out as a failure would: its raylet and workers are killed."""
        self.cluster.remove_node(self.nodes.pop(name), allow_graceful=False)


def ray_missing() -> str | None:
    if importlib.util.find_spec("ray") is None:
        return "ray is not installed (pip install 'aipaas[ray]'; scripts/setup.sh installs it)"
    return None


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    reason = ray_missing()
    if reason is not None:
        pytest.skip(reason)
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(
        initialize_head=True,
        connect=False,
        head_node_args={"num_cpus": 1, "labels": {"aipaas.dev/node": "ray-head"}},
    )
    found = RayCluster(cluster, str(cluster.address))
    for name in GPU_NODES:
        found.nodes[name] = cluster.add_node(
            num_cpus=8,
            num_gpus=GPUS_PER_NODE,
            resources={"accelerator_type:H100": 1},
            labels={"aipaas.dev/node": name},
        )
    cluster.wait_for_nodes()
    # The test process is a driver of its own (counting actors); the backend shares it.
    ray.init(address=found.address, namespace="aipaas-tests", log_to_driver=False)
    yield found
    ray.shutdown()
    cluster.shutdown()  # type: ignore[no-untyped-call]  # ray is untyped


class World:
    """A store with tenant acme and queue research, and helpers to submit and cycle."""

    def __init__(self, store: Store, tmp: Path) -> None:
        self.store = store
        self.tmp = tmp
        self.service = ObjectService(store, ADMIN)
        self.service.apply_text(SETUP)

    def controller(self, backend: Backend, **options: Any) -> Controller:
        return Controller(self.store, backend, log_dir=self.tmp / "logs", **options)

    def submit(self, name: str, tasks: str) -> None:
        text = (
            f"apiVersion: aipaas/v1\nkind: Job\nmetadata: {{name: {name}, tenant: acme}}\n"
            f"spec:\n  queue: research\n  tasks:\n{tasks}"
        )
        self.service.apply_text(text)

    def job(self, name: str) -> Job:
        job = self.store.get("Job", "acme", name)
        assert isinstance(job, Job)
        return job

    def phase(self, name: str) -> str:
        status = self.job(name).status
        return status.phase.value if status else "Pending"

    def reasons(self, name: str) -> list[str]:
        return [e.reason for e in self.store.list_events(kind="Job", name=name)]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    store = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    yield World(store, tmp_path)
    store.close()


def cycle_until(
    controller: Controller,
    done: Callable[[], bool],
    timeout: float = 40.0,
    pause: float = 0.1,
    explain: Callable[[], object] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        controller.run_cycle()
        if done():
            return
        time.sleep(pause)
    raise AssertionError(f"condition not reached in time: {explain() if explain else ''}")
