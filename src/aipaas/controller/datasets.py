"""The controller's dataset extension: prefetch for the queue's head, warm on demand, evict by
time to live, and report every node's cache in each Dataset's status, with events and metrics.

What to load and evict is the pure prefetch policy's answer (data/prefetch_policy.py) to the
pending jobs that name datasets (oldest first) and the caches the backend reports; the backend
copies (``DatasetCaches``, backends/datasets.py) and never evicts an entry a task reads. The
Dataset's stored status is the memory between cycles (and restarts): a node complete now and
not before is a ``DatasetLoaded`` event, a node gone from it ``DatasetEvicted``.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence

from prometheus_client import Gauge

from aipaas.api.data import CacheMode, Dataset, DatasetStatus, NodeCacheStatus
from aipaas.api.duration import seconds
from aipaas.api.job import Job, JobPhase
from aipaas.backends.datasets import CachedDataset, DatasetCaches, dataset_caches
from aipaas.controller.datasets_launch import key_of, source_of
from aipaas.controller.extensions import CycleContext
from aipaas.data.prefetch_policy import (
    CacheEntry,
    DatasetNeed,
    NodeCache,
    PrefetchInput,
    QueuedJob,
    plan_prefetch,
)
from aipaas.settings import Settings

log = logging.getLogger("aipaas.controller")
POOL_LABEL = "aipaas.dev/pool"
WARM_REQUESTED = "aipaas.dev/warm-requested"  # server/data_routes.py writes these two
WARM_NODES = "aipaas.dev/warm-nodes"
_COUNTERS = ("hits", "misses", "bytes_from_source", "bytes_from_cache")


class DatasetExtension:
    name = "datasets"

    def __init__(self, period_seconds: float = 1.0) -> None:
        self.period = period_seconds
        self._last = 0.0
        self._gauges: dict[str, Gauge] = {}

    def run(self, context: CycleContext) -> None:
        caches = dataset_caches(context.backend)
        if caches is None or time.monotonic() - self._last < self.period:
            return
        self._last = time.monotonic()
        datasets = [
            d for d in context.store.list_objects("Dataset", None) if isinstance(d, Dataset)
        ]
        if not datasets:
            return
        pools = {n.name: n.labels.get(POOL_LABEL, "") for n in context.nodes}
        nodes = [n for n in pools if caches.cache_capacity(n) is not None]
        by_key = {key_of(d): d for d in datasets}
        entries = caches.cached_datasets()
        now = time.time()
        warmed = self._prefetch(context, caches, by_key, nodes, pools, entries, now)
        entries = caches.cached_datasets()
        for dataset in datasets:
            mine = [e for e in entries if e.key == key_of(dataset)]
            self._report(context, dataset, mine, pools, warmed.get(key_of(dataset)))
        self._metrics(context, entries, by_key)

    # decisions ----------------------------------------------------------------------------

    def _prefetch(
        self,
        context: CycleContext,
        caches: DatasetCaches,
        by_key: dict[str, Dataset],
        nodes: list[str],
        pools: dict[str, str],
        entries: list[CachedDataset],
        now: float,
    ) -> dict[str, str]:
        """Start loads and evictions; the warm requests carried out (key -> its time)."""
        queue = self._queue(context, by_key, nodes, pools)
        request = PrefetchInput(
            queue=queue,
            nodes=[self._node_cache(caches, n, entries, by_key) for n in nodes],
            now=now,
        )
        plan = plan_prefetch(request)
        for eviction in plan.evictions:
            if caches.evict_dataset(eviction.node, eviction.dataset):
                self._event(
                    context,
                    by_key.get(eviction.dataset),
                    "DatasetEvicted",
                    f"evicted from {eviction.node} ({eviction.reason})",
                )
        loads = [(load.node, load.dataset, f"for job {load.job}") for load in plan.loads]
        warmed, asked = self._warm_requests(context, by_key, nodes, entries)
        loads += asked
        for node, key, why in loads:
            dataset = by_key.get(key)
            if dataset is None:
                continue
            try:
                source = source_of(context.store, dataset).to_json()
            except Exception as err:  # a secret gone: said on the dataset, not raised
                self._event(context, dataset, "LoadFailed", str(err), warning=True)
                continue
            if caches.load_dataset(node, key, source):
                self._event(context, dataset, "DatasetLoading", f"loading on {node} {why}")
        demand: dict[str, int] = defaultdict(int)
        for job in queue:
            for need in job.datasets:
                demand[need.dataset] += 1
        pinned = [k for k, d in by_key.items() if d.spec.cache.mode is CacheMode.PINNED]
        for node in nodes:
            caches.set_cache_hints(node, pinned, demand)
        return warmed

    def _queue(
        self,
        context: CycleContext,
        by_key: dict[str, Dataset],
        nodes: list[str],
        pools: dict[str, str],
    ) -> list[QueuedJob]:
        """Pending jobs naming datasets, oldest first (submission order within the head)."""
        named = {(d.tenant, d.name): (k, d) for k, d in by_key.items()}
        jobs = [
            j
            for j in context.store.list_objects("Job", None)
            if isinstance(j, Job)
            and j.spec.datasets
            and (j.status is None or j.status.phase is JobPhase.PENDING)
        ]
        jobs.sort(key=lambda j: j.metadata.creation_timestamp or "")
        queue: list[QueuedJob] = []
        for job in jobs:
            needs = []
            for mount in job.spec.datasets or ():
                found = named.get((job.tenant, mount.name))
                if found is None:
                    continue
                key, dataset = found
                allowed = _allowed(dataset, nodes, pools)
                needs.append(
                    DatasetNeed(
                        key,
                        _size(dataset),
                        cacheable_on=frozenset(allowed),
                        max_replicas=dataset.spec.cache.replicas or None,
                    )
                )
            candidates = sorted({n for need in needs for n in need.cacheable_on or ()})
            queue.append(QueuedJob(f"{job.tenant}/{job.name}", tuple(needs), tuple(candidates)))
        return queue

    def _node_cache(
        self,
        caches: DatasetCaches,
        node: str,
        entries: list[CachedDataset],
        by_key: dict[str, Dataset],
    ) -> NodeCache:
        cached = []
        for entry in entries:
            if entry.node != node:
                continue
            dataset = by_key.get(entry.key)
            ttl = dataset.spec.cache.ttl if dataset is not None else None
            pinned = dataset is not None and dataset.spec.cache.mode is CacheMode.PINNED
            last = entry.last_used or 0.0
            cached.append(
                CacheEntry(
                    dataset=entry.key,
                    bytes=entry.bytes,
                    complete=entry.complete,
                    loading=entry.loading,
                    pinned=pinned,
                    in_use=entry.in_use > 0,
                    last_used=last,
                    expires_at=None if ttl is None or not last else last + seconds(ttl),
                    size_bytes=entry.size_bytes,
                )
            )
        return NodeCache(node, caches.cache_capacity(node) or 0, tuple(cached))

    def _warm_requests(
        self,
        context: CycleContext,
        by_key: dict[str, Dataset],
        nodes: list[str],
        entries: list[CachedDataset],
    ) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
        """``aipaas dataset warm``: loads on the nodes asked (or the policy's), once per ask."""
        loads: list[tuple[str, str, str]] = []
        warmed: dict[str, str] = {}
        for key, dataset in by_key.items():
            asked = dataset.metadata.annotations.get(WARM_REQUESTED)
            done = dataset.status.warmed if dataset.status is not None else ""
            if not asked or asked == done:
                continue
            wanted = [n for n in dataset.metadata.annotations.get(WARM_NODES, "").split(",") if n]
            targets = wanted or nodes[: max(1, dataset.spec.cache.replicas)]
            for node in targets:
                if node not in nodes:
                    self._event(
                        context,
                        dataset,
                        "LoadFailed",
                        f"node {node} has no cache here",
                        warning=True,
                    )
                    continue
                have = next((e for e in entries if e.key == key and e.node == node), None)
                if have is None or not (have.complete or have.loading):
                    loads.append((node, key, "on request"))
            warmed[key] = asked
        return warmed, loads

    # reports ------------------------------------------------------------------------------

    def _report(
        self,
        context: CycleContext,
        dataset: Dataset,
        entries: list[CachedDataset],
        pools: dict[str, str],
        warmed: str | None,
    ) -> None:
        before = dataset.status or DatasetStatus()
        nodes = [
            NodeCacheStatus(
                node=e.node,
                pool=pools.get(e.node, ""),
                bytes=e.bytes,
                complete=e.complete,
                files=e.files,
                in_use=e.in_use,
            )
            for e in sorted(entries, key=lambda e: e.node)
        ]
        complete = [e for e in entries if e.complete]
        failed = [e for e in entries if e.error and not e.loading and not e.complete]
        phase = (
            "Cached"
            if complete
            else "Loading"
            if any(e.loading for e in entries)
            else "Failed"
            if failed
            else "Pending"
        )
        sizes = [e.size_bytes for e in complete if e.size_bytes is not None]
        totals = {c: sum(getattr(e, c) for e in entries) for c in _COUNTERS}
        status = before.model_copy(
            update={
                "phase": phase,
                "nodes": nodes,
                "size_bytes": sizes[0] if sizes else before.size_bytes,
                "files": complete[0].files if complete else before.files,
                "message": failed[0].error if failed else "",
                "warmed": warmed or before.warmed,
                **{c: max(totals[c], getattr(before, c)) for c in _COUNTERS},
            }
        )
        was = {n.node for n in before.nodes if n.complete}
        for entry in complete:
            if entry.node not in was:
                self._event(
                    context,
                    dataset,
                    "DatasetLoaded",
                    f"{entry.bytes} bytes in {entry.files} files cached on {entry.node}",
                )
        for node in {n.node for n in before.nodes} - {e.node for e in entries}:
            self._event(context, dataset, "DatasetEvicted", f"no longer cached on {node}")
        if failed and before.message != failed[0].error:
            self._event(context, dataset, "LoadFailed", failed[0].error, warning=True)
        if status != before:
            with context.transaction() as tx:
                context.store.update_status(dataset, status, conn=tx)

    def _event(
        self,
        context: CycleContext,
        dataset: Dataset | None,
        reason: str,
        message: str,
        *,
        warning: bool = False,
    ) -> None:
        if dataset is not None:
            context.store.record_event(dataset, reason, message, warning=warning)

    def _metrics(
        self, context: CycleContext, entries: Sequence[CachedDataset], by_key: dict[str, Dataset]
    ) -> None:
        """Cache hits and misses, bytes from sources and from caches, bytes cached: per
        tenant, set whole each time (counted by the nodes, kept in their entries)."""
        registry = context.metrics.registry
        if not self._gauges:
            try:
                for name in (*_COUNTERS, "cached_bytes"):
                    self._gauges[name] = Gauge(
                        f"aipaas_dataset_{name}",
                        f"Datasets: {name.replace('_', ' ')} per tenant",
                        ["tenant"],
                        registry=registry,
                        multiprocess_mode="mostrecent",
                    )
            except ValueError:  # another extension of this process registered them first
                return
        totals: dict[tuple[str, str], int] = defaultdict(int)
        for entry in entries:
            dataset = by_key.get(entry.key)
            tenant = dataset.tenant if dataset is not None else entry.key.split("/")[0]
            for name in _COUNTERS:
                totals[(name, tenant)] += int(getattr(entry, name))
            totals[("cached_bytes", tenant)] += entry.bytes
        for (name, tenant), value in totals.items():
            self._gauges[name].labels(tenant=tenant).set(value)


def _allowed(dataset: Dataset, nodes: list[str], pools: dict[str, str]) -> list[str]:
    wanted = set(dataset.spec.cache.pools)
    return [n for n in nodes if not wanted or pools.get(n) in wanted]


def _size(dataset: Dataset) -> int:
    measured = dataset.status.size_bytes if dataset.status is not None else None
    return measured or dataset.spec.declared_bytes() or 0


def datasets_extension(settings: Settings) -> DatasetExtension | None:
    """Every server runs it; it does nothing until a backend with caches has datasets."""
    return DatasetExtension()
