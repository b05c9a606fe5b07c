"""What the dataset extension reports each time: every Dataset's status (its nodes' caches,
phase, counters), events for loads, evictions and failures, and the metrics per tenant.

The Dataset's stored status is the memory between cycles (and restarts): a node complete now
and not before is a ``DatasetLoaded`` event, a node gone from it ``DatasetEvicted``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from prometheus_client import Gauge

from aipaas.api.data import Dataset, DatasetStatus, NodeCacheStatus
from aipaas.backends.datasets import CachedDataset
from aipaas.controller.extensions import CycleContext

#: the nodes' counters, summed per dataset (status) and per tenant (metrics)
COUNTERS = ("hits", "misses", "bytes_from_source", "bytes_from_cache")


def report(
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
    totals = {c: sum(getattr(e, c) for e in entries) for c in COUNTERS}
    status = before.model_copy(
        update={
            "phase": phase,
            "nodes": nodes,
            "size_bytes": sizes[0] if sizes else before.size_bytes,
            "files": complete[0].files if complete else before.files,
            "message": failed[0].error if failed else "",
            "warmed": warmed or before.warmed,
            **{c: max(totals[c], getattr(before, c)) for c in COUNTERS},
        }
    )
    was = {n.node for n in before.nodes if n.complete}
    for entry in complete:
        if entry.node not in was:
            event(
                context,
                dataset,
                "DatasetLoaded",
                f"{entry.bytes} bytes in {entry.files} files cached on {entry.node}",
            )
    for node in {n.node for n in before.nodes} - {e.node for e in entries}:
        event(context, dataset, "DatasetEvicted", f"no longer cached on {node}")
    if failed and before.message != failed[0].error:
        event(context, dataset, "LoadFailed", failed[0].error, warning=True)
    if status != before:
        with context.transaction() as tx:
            context.store.update_status(dataset, status, conn=tx)


def event(
    context: CycleContext,
    dataset: Dataset | None,
    reason: str,
    message: str,
    *,
    warning: bool = False,
) -> None:
    if dataset is not None:
        context.store.record_event(dataset, reason, message, warning=warning)


class DatasetMetrics:
    """Cache hits and misses, bytes from sources and from caches, bytes cached: per tenant,
    set whole each time (counted by the nodes, kept in their entries)."""

    def __init__(self) -> None:
        self._gauges: dict[str, Gauge] = {}

    def set(
        self, context: CycleContext, entries: Sequence[CachedDataset], by_key: dict[str, Dataset]
    ) -> None:
        registry = context.metrics.registry
        if not self._gauges:
            try:
                for name in (*COUNTERS, "cached_bytes"):
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
            for name in COUNTERS:
                totals[(name, tenant)] += int(getattr(entry, name))
            totals[("cached_bytes", tenant)] += entry.bytes
        for (name, tenant), value in totals.items():
            self._gauges[name].labels(tenant=tenant).set(value)
