"""The dataset extension's decisions against a store and a backend's caches (a recording
fake): prefetch within the cache policy's pools and replicas, warm on request, time to live,
entries read now kept, orphans removed, the status and events it writes."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from aipaas.api.data import Dataset
from aipaas.api.tenancy import Role
from aipaas.backends.base import NodeInfo
from aipaas.backends.datasets import CachedDataset
from aipaas.clock import SystemClock
from aipaas.controller.datasets import DatasetExtension
from aipaas.controller.datasets_launch import key_of
from aipaas.controller.extensions import CycleContext
from aipaas.metering.metrics import Metrics
from aipaas.server.service import ObjectService
from aipaas.store import Store
from aipaas.tenancy.principal import Principal

ADMIN = Principal("admin", "", Role.PLATFORM_ADMIN)
POOLS = {"gpu-1": "gpu-a", "gpu-2": "gpu-a", "cpu-1": "cpu"}
SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
---
apiVersion: aipaas/v1
kind: Dataset
metadata: {name: imagenet, tenant: acme}
spec:
  source: s3://bucket/imagenet
  size: 10Gi
  cache: {pools: [gpu-a], replicas: 1, ttl: 1h}
"""
JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {name: train, tenant: acme}
spec:
  queue: research
  datasets: [{name: imagenet, mountPath: /data}]
  tasks: [{name: w, command: ["true"]}]
"""


@dataclass
class FakeCaches:
    """Three nodes' caches as a backend reports them; loads and evictions are recorded."""

    entries: list[CachedDataset] = field(default_factory=list)
    loads: list[tuple[str, str]] = field(default_factory=list)
    evicted: list[tuple[str, str]] = field(default_factory=list)
    name: str = "fake"

    def cached_datasets(self) -> list[CachedDataset]:
        return list(self.entries)

    def cache_capacity(self, node: str) -> int | None:
        return 100 << 30 if node in POOLS else None

    def load_dataset(self, node: str, key: str, source: Mapping[str, Any]) -> bool:
        assert source["url"] == "s3://bucket/imagenet"
        self.loads.append((node, key))
        return True

    def evict_dataset(self, node: str, key: str) -> bool:
        entry = next(e for e in self.entries if (e.node, e.key) == (node, key))
        if entry.in_use:
            return False
        self.entries.remove(entry)
        self.evicted.append((node, key))
        return True

    def set_cache_hints(self, node: str, pinned: Sequence[str], demand: Mapping[str, int]) -> None:
        pass


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    ObjectService(opened, ADMIN).apply_text(SETUP)
    yield opened
    opened.close()


def _run(store: Store, caches: FakeCaches, extension: DatasetExtension | None = None) -> None:
    nodes = [
        NodeInfo(n, "fake", 8000, 1024, labels={"aipaas.dev/pool": pool})
        for n, pool in POOLS.items()
    ]
    context = CycleContext(
        store=store,
        backend=caches,  # type: ignore[arg-type]  # only the cache capability is used
        clock=SystemClock(),
        metrics=Metrics(),
        nodes=nodes,
        transaction=store.transaction,
        cycle=0,
    )
    (extension or DatasetExtension(period_seconds=0)).run(context)


def _dataset(store: Store) -> Dataset:
    found = store.get("Dataset", "acme", "imagenet")
    assert isinstance(found, Dataset)
    return found


def _reasons(store: Store) -> list[str]:
    return [e.reason for e in store.list_events(kind="Dataset", name="imagenet")]


def _entry(key: str, node: str, **changes: Any) -> CachedDataset:
    entry = CachedDataset(
        node=node,
        key=key,
        bytes=10 << 30,
        size_bytes=10 << 30,
        complete=True,
        files=3,
        in_use=0,
        loading=False,
        last_used=time.time(),
    )
    return replace(entry, **changes)


def test_prefetch_loads_once_within_the_pools_and_reports_the_cache(store: Store) -> None:
    ObjectService(store, ADMIN).apply_text(JOB)
    caches = FakeCaches()
    _run(store, caches)
    key = key_of(_dataset(store))
    assert len(caches.loads) == 1  # replicas: 1
    assert caches.loads[0][0] in ("gpu-1", "gpu-2") and caches.loads[0][1] == key
    assert "DatasetLoading" in _reasons(store)

    caches.entries = [_entry(key, caches.loads[0][0], hits=1, bytes_from_cache=5)]
    _run(store, caches)
    status = _dataset(store).status
    assert status is not None and status.phase == "Cached"
    assert [(n.node, n.pool, n.complete) for n in status.nodes] == [
        (caches.loads[0][0], "gpu-a", True)
    ]
    assert (status.hits, status.size_bytes, status.files) == (1, 10 << 30, 3)
    assert _reasons(store).count("DatasetLoaded") == 1
    _run(store, caches)
    assert _reasons(store).count("DatasetLoaded") == 1  # said once
    assert len(caches.loads) == 1  # complete: not loaded again


def test_warm_on_request_and_a_node_without_cache(store: Store) -> None:
    dataset = _dataset(store)
    annotations = {"aipaas.dev/warm-requested": "t1", "aipaas.dev/warm-nodes": "cpu-1,nowhere"}
    meta = dataset.metadata.model_copy(update={"annotations": annotations})
    store.update(
        dataset.model_copy(update={"metadata": meta}),
        expected_version=dataset.metadata.resource_version,
    )
    caches = FakeCaches()
    _run(store, caches)
    # Asked by name, the node is loaded even outside the policy's pools; an unknown one fails.
    assert caches.loads == [("cpu-1", key_of(dataset))]
    assert "LoadFailed" in _reasons(store)
    status = _dataset(store).status
    assert status is not None and status.warmed == "t1"
    _run(store, caches)
    assert len(caches.loads) == 1  # one load per request


def test_time_to_live_spares_entries_read_now_and_orphans_go(store: Store) -> None:
    key = key_of(_dataset(store))
    old = time.time() - 2 * 3600  # ttl is 1h
    caches = FakeCaches(
        entries=[
            _entry(key, "gpu-1", last_used=old),
            _entry(key, "gpu-2", last_used=old, in_use=1),
            _entry("acme/deleted-0123456789ab", "cpu-1"),
            _entry("acme/read-0123456789ab", "gpu-1", in_use=2),
        ]
    )
    extension = DatasetExtension(period_seconds=0)
    _run(store, caches, extension)
    assert sorted(caches.evicted) == [("cpu-1", "acme/deleted-0123456789ab"), ("gpu-1", key)]
    assert {(e.node, e.key) for e in caches.entries} == {
        ("gpu-2", key),
        ("gpu-1", "acme/read-0123456789ab"),
    }
    assert "DatasetEvicted" in _reasons(store)
    status = _dataset(store).status
    assert status is not None and [n.node for n in status.nodes] == ["gpu-2"]
