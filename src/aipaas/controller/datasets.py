"""The controller's dataset extension: prefetch for the queue's head, warm on demand, evict by
time to live, and report every node's cache in each Dataset's status, with events and metrics.

What to load and evict is the pure prefetch policy's answer (data/prefetch_policy.py) to the
pending jobs that name datasets (oldest first) and the caches the backend reports; the backend
copies (``DatasetCaches``, backends/datasets.py) and never evicts an entry a task reads. Reports:
controller/datasets_report.py.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict

from aipaas.api.data import CacheMode, Dataset
from aipaas.api.duration import seconds
from aipaas.api.job import Job, JobPhase
from aipaas.backends.datasets import CANCEL_LOAD, CachedDataset, DatasetCaches, dataset_caches
from aipaas.controller.datasets_launch import key_of, source_of
from aipaas.controller.datasets_report import DatasetMetrics, event, report
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
RETRY_SECONDS = 60.0


class DatasetExtension:
    name = "datasets"

    def __init__(self, period_seconds: float = 1.0) -> None:
        self.period = period_seconds
        self._last = 0.0
        self.metrics = DatasetMetrics()
        #: (node, key) -> when a failed load was first seen: prefetch retries it only later
        self._failed: dict[tuple[str, str], float] = {}

    def run(self, context: CycleContext) -> None:
        caches = dataset_caches(context.backend)
        if caches is None or time.monotonic() - self._last < self.period:
            return
        self._last = time.monotonic()
        datasets = [
            d for d in context.store.list_objects("Dataset", None) if isinstance(d, Dataset)
        ]
        if not datasets:
            # The last dataset deleted: its entries (and a load still running) go all the same.
            self._forget_orphans(caches, {}, caches.cached_datasets())
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
            report(context, dataset, mine, pools, warmed.get(key_of(dataset)))
        self.metrics.set(context, entries, by_key)

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
                event(
                    context,
                    by_key.get(eviction.dataset),
                    "DatasetEvicted",
                    f"evicted from {eviction.node} ({eviction.reason})",
                )
        self._forget_orphans(caches, by_key, entries)
        failing = self._failing(entries, now)
        loads = [
            (load.node, load.dataset, f"for job {load.job}")
            for load in plan.loads
            if (load.node, load.dataset) not in failing
        ]
        warmed, asked = self._warm_requests(context, by_key, nodes, entries)
        loads += asked
        for node, key, why in loads:
            dataset = by_key.get(key)
            if dataset is None:
                continue
            try:
                source = source_of(context.store, dataset).to_json()
            except Exception as err:  # a secret gone: said on the dataset, not raised
                event(context, dataset, "LoadFailed", str(err), warning=True)
                continue
            if caches.load_dataset(node, key, source):
                event(context, dataset, "DatasetLoading", f"loading on {node} {why}")
        demand: dict[str, int] = defaultdict(int)
        for job in queue:
            for need in job.datasets:
                demand[need.dataset] += 1
        pinned = [k for k, d in by_key.items() if d.spec.cache.mode is CacheMode.PINNED]
        for node in nodes:
            caches.set_cache_hints(node, pinned, demand)
        return warmed

    def _forget_orphans(
        self, caches: DatasetCaches, by_key: dict[str, Dataset], entries: list[CachedDataset]
    ) -> None:
        """Entries of datasets deleted (or whose source changed: a new key) go once no task
        reads them and no load fills them; a background load filling one is withdrawn (its
        copier ends, and a later cycle removes the entry): a source that never ends would
        otherwise keep it copying for nobody."""
        cancel = getattr(caches, CANCEL_LOAD, None)
        for entry in entries:
            if entry.key in by_key:
                continue
            if entry.loading:
                if cancel is not None and cancel(entry.node, entry.key):
                    log.info("dataset load %s on %s withdrawn: no dataset", entry.key, entry.node)
                continue
            if not entry.in_use and caches.evict_dataset(entry.node, entry.key):
                log.info("dataset cache %s on %s removed: no dataset", entry.key, entry.node)

    def _failing(self, entries: list[CachedDataset], now: float) -> set[tuple[str, str]]:
        """Loads that failed less than RETRY_SECONDS ago (not retried by prefetch yet)."""
        failed = {(e.node, e.key) for e in entries if e.error and not e.loading and not e.complete}
        self._failed = {k: self._failed.get(k, now) for k in failed}
        return {k for k, since in self._failed.items() if now - since < RETRY_SECONDS}

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
                    event(
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


def _allowed(dataset: Dataset, nodes: list[str], pools: dict[str, str]) -> list[str]:
    wanted = set(dataset.spec.cache.pools)
    return [n for n in nodes if not wanted or pools.get(n) in wanted]


def _size(dataset: Dataset) -> int:
    measured = dataset.status.size_bytes if dataset.status is not None else None
    return measured or dataset.spec.declared_bytes() or 0


def datasets_extension(settings: Settings) -> DatasetExtension | None:
    """Every server runs it; it does nothing until a backend with caches has datasets."""
    return DatasetExtension()
