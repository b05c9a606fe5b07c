"""Property: whatever the queue and the caches, a prefetch plan never overfills a node's cache,
never evicts data tasks read or a load fills, and evicts pinned data only at its expiry."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aipaas.data.prefetch_policy import (
    CacheEntry,
    DatasetNeed,
    NodeCache,
    PrefetchInput,
    PrefetchOptions,
    QueuedJob,
    plan_prefetch,
)

NODES = ("a", "b", "c")
DATASETS = ("d0", "d1", "d2", "d3", "d4", "d5")
SIZES = {name: (i + 1) * 10 for i, name in enumerate(DATASETS)}
NOW = 1000.0


@st.composite
def caches(draw: st.DrawFn) -> list[NodeCache]:
    out = []
    for node in NODES:
        capacity = draw(st.integers(0, 120))
        entries: list[CacheEntry] = []
        used = 0
        for name in draw(st.lists(st.sampled_from(DATASETS), unique=True, max_size=4)):
            size = SIZES[name]
            present = draw(st.integers(0, size))
            loading = present < size and draw(st.booleans())
            reserved = size if loading else present
            if used + reserved > capacity:
                continue
            used += reserved
            entries.append(
                CacheEntry(
                    name,
                    present,
                    complete=present == size,
                    loading=loading,
                    pinned=draw(st.booleans()),
                    in_use=draw(st.booleans()),
                    last_used=draw(st.floats(0, NOW)),
                    expires_at=draw(st.none() | st.floats(0, 2 * NOW)),
                    size_bytes=size,
                )
            )
        out.append(NodeCache(node, capacity, tuple(entries)))
    return out


@st.composite
def queues(draw: st.DrawFn) -> list[QueuedJob]:
    jobs = []
    for i in range(draw(st.integers(0, 6))):
        names = draw(st.lists(st.sampled_from(DATASETS), unique=True, min_size=1, max_size=2))
        needs = tuple(DatasetNeed(name, SIZES[name]) for name in names)
        nodes = tuple(draw(st.lists(st.sampled_from(NODES), unique=True, max_size=3)))
        jobs.append(QueuedJob(f"j{i}", needs, nodes))
    return jobs


@settings(max_examples=200, deadline=None)
@given(caches(), queues(), st.integers(1, 3), st.integers(1, 6), st.booleans())
def test_plan_keeps_capacity_and_in_use_data(
    nodes: list[NodeCache], queue: list[QueuedJob], loads: int, lookahead: int, seed: bool
) -> None:
    options = PrefetchOptions(lookahead_jobs=lookahead, max_loads_per_node=loads, seed_copies=seed)
    plan = plan_prefetch(PrefetchInput(queue, nodes, NOW, options))
    for cache in nodes:
        by_name = {entry.dataset: entry for entry in cache.entries}
        evicted = {e.dataset for e in plan.evictions if e.node == cache.node}
        for eviction in (e for e in plan.evictions if e.node == cache.node):
            gone = by_name[eviction.dataset]
            assert not gone.in_use and not gone.loading
            if gone.pinned:
                assert eviction.reason == "expired"
                assert gone.expires_at is not None and gone.expires_at <= NOW
        new = [load for load in plan.loads if load.node == cache.node]
        for load in new:
            old = by_name.get(load.dataset)
            assert old is None or not (old.complete or old.loading)
            assert load.bytes == SIZES[load.dataset] - (old.bytes if old else 0)
        kept = sum(
            entry.reserved_bytes
            for entry in cache.entries
            if entry.dataset not in evicted and entry.dataset not in {ld.dataset for ld in new}
        )
        assert kept + sum(SIZES[load.dataset] for load in new) <= cache.capacity_bytes
        running = sum(1 for entry in cache.entries if entry.loading)
        assert not new or running + len(new) <= loads
