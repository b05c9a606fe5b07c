"""Controller fixtures: a store, an admitted tenant/queue, and helpers to submit and cycle."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aipaas.api.job import Job
from aipaas.api.registry import load_objects
from aipaas.api.tenancy import Role
from aipaas.backends.base import Backend
from aipaas.backends.sim import SimBackend
from aipaas.backends.sim.cluster import load_cluster_with_slices
from aipaas.clock import Clock
from aipaas.controller.cycle import Controller
from aipaas.server.service import ObjectService
from aipaas.store import Store
from aipaas.tenancy.principal import Principal

SETUP = """
apiVersion: aipaas/v1
kind: Tenant
metadata: {{name: acme}}
spec: {{quota: {quota}}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {{name: research, tenant: acme}}
"""
ADMIN = Principal("admin", "", Role.PLATFORM_ADMIN)


class World:
    def __init__(self, store: Store, tmp: Path) -> None:
        self.store = store
        self.tmp = tmp
        self.service = ObjectService(store, ADMIN)

    def setup(self, quota: str = "{gpu: 8, cpu: 64, memory: 512Gi}") -> None:
        self.service.apply_text(SETUP.format(quota=quota))

    def controller(
        self, backend: Backend, clock: Clock | None = None, **options: Any
    ) -> Controller:
        return Controller(self.store, backend, log_dir=self.tmp / "logs", clock=clock, **options)

    def submit(
        self,
        name: str,
        tasks: str,
        *,
        extra: str = "",
        annotations: str = "",
        queue: str = "research",
    ) -> None:
        text = (
            f"apiVersion: aipaas/v1\nkind: Job\nmetadata: {{name: {name}, tenant: acme"
            f"{', annotations: ' + annotations if annotations else ''}}}\n"
            f"spec:\n  queue: {queue}\n{extra}  tasks:\n{tasks}"
        )
        load_objects(text)  # fail early with a clear error if the test wrote a bad manifest
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


def cycle_until(
    controller: Controller, done: Callable[[], bool], timeout: float = 20.0, pause: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        controller.run_cycle()
        if done():
            return
        time.sleep(pause)
    raise AssertionError("condition not reached in time")


#: the two kinds of cluster the batch tests run on: GPUs by count only, or GPUs that also
#: publish ResourceSlices (``resources.gpu`` then compiles to a DRA claim)
CLUSTER_KINDS = ("count", "slices")


def sim_backend(world: World, clock: Clock, kind: str, default_duration: float = 100) -> SimBackend:
    """The default sim cluster (two 8-GPU nodes), publishing slices when ``kind`` says so."""
    nodes, slices = load_cluster_with_slices(None)
    published = slices if kind == "slices" else ()
    return SimBackend(world.tmp / "run", nodes, clock, default_duration, slices=published)


@pytest.fixture(params=CLUSTER_KINDS)
def cluster_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    store = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    yield World(store, tmp_path)
    store.close()
