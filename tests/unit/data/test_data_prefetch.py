"""The prefetch policy: what it loads for the queue's heads and what it evicts for room."""

from __future__ import annotations

from typing import Any

from aipaas.data.prefetch_policy import (
    CacheEntry,
    DatasetNeed,
    NodeCache,
    PrefetchInput,
    PrefetchOptions,
    QueuedJob,
    choose_evictions,
    eviction_score,
    plan_prefetch,
)

G = 1 << 30
NOW = 10_000.0


def job(name: str, dataset: str, size_gib: int, *nodes: str, **policy: object) -> QueuedJob:
    need = DatasetNeed(dataset, size_gib * G, **policy)  # type: ignore[arg-type]
    return QueuedJob(name, (need,), tuple(nodes))


def entry(dataset: str, size_gib: int, **state: object) -> CacheEntry:
    return CacheEntry(dataset, size_gib * G, **{"complete": True, **state})  # type: ignore[arg-type]


def plan(queue: list[QueuedJob], nodes: list[NodeCache], **options: Any) -> PrefetchInput:
    return PrefetchInput(queue, nodes, NOW, PrefetchOptions(**options))


class TestLoads:
    def test_loads_a_head_jobs_data_on_every_node_it_will_run_on(self) -> None:
        nodes = [NodeCache("a", 100 * G), NodeCache("b", 100 * G), NodeCache("c", 100 * G)]
        result = plan_prefetch(plan([job("j1", "imagenet", 10, "a", "b")], nodes))
        assert {(load.dataset, load.node) for load in result.loads} == {
            ("imagenet", "a"),
            ("imagenet", "b"),
        }
        assert all(load.bytes == 10 * G and load.job == "j1" for load in result.loads)
        assert result.evictions == ()

    def test_a_partial_copy_resumes_with_the_missing_bytes(self) -> None:
        nodes = [NodeCache("a", 100 * G, (entry("imagenet", 4, complete=False),))]
        result = plan_prefetch(plan([job("j1", "imagenet", 10, "a")], nodes))
        assert [load.bytes for load in result.loads] == [6 * G]

    def test_nothing_to_do_for_a_warm_node_or_a_load_under_way(self) -> None:
        nodes = [
            NodeCache("a", 100 * G, (entry("imagenet", 10),)),
            NodeCache("b", 100 * G, (entry("imagenet", 3, complete=False, loading=True),)),
        ]
        result = plan_prefetch(plan([job("j1", "imagenet", 10, "a", "b")], nodes))
        assert result.loads == () and result.skipped == ()

    def test_head_of_queue_is_warmed_first_when_loads_are_limited(self) -> None:
        nodes = [NodeCache("a", 100 * G)]
        queue = [job("first", "d1", 5, "a"), job("second", "d2", 5, "a")]
        result = plan_prefetch(plan(queue, nodes, max_loads_per_node=1))
        assert [(load.job, load.dataset) for load in result.loads] == [("first", "d1")]
        assert [(s.job, s.reason) for s in result.skipped] == [
            ("second", "the node loads as much as it may at once")
        ]

    def test_lookahead_bounds_the_jobs_served(self) -> None:
        nodes = [NodeCache("a", 100 * G)]
        queue = [job(f"j{i}", f"d{i}", 1, "a") for i in range(5)]
        result = plan_prefetch(plan(queue, nodes, lookahead_jobs=2, max_loads_per_node=9))
        assert [load.job for load in result.loads] == ["j0", "j1"]

    def test_jobs_expected_past_the_horizon_wait_their_turn(self) -> None:
        nodes = [NodeCache("a", 100 * G)]
        soon = QueuedJob("soon", (DatasetNeed("d1", G),), ("a",), expected_start=NOW + 600)
        later = QueuedJob("later", (DatasetNeed("d2", G),), ("a",), expected_start=NOW + 7200)
        unknown = QueuedJob("unknown", (DatasetNeed("d3", G),), ("a",))
        queue = [soon, later, unknown]
        result = plan_prefetch(plan(queue, nodes, max_loads_per_node=9))
        assert [load.job for load in result.loads] == ["soon", "unknown"]
        options = PrefetchOptions(max_loads_per_node=9, horizon_s=None)
        unlimited = plan_prefetch(PrefetchInput(queue, nodes, NOW, options))
        assert [load.job for load in unlimited.loads] == ["soon", "later", "unknown"]

    def test_seeding_puts_one_copy_of_queued_data_held_nowhere_on_the_roomiest_node(
        self,
    ) -> None:
        nodes = [
            NodeCache("full", 100 * G, (entry("held", 90),)),
            NodeCache("roomy", 100 * G),
            NodeCache("busy", 200 * G, (entry("x", 1, complete=False, loading=True),)),
        ]
        queue = [job("j1", "held", 5), job("j2", "nowhere", 5), job("j3", "nowhere", 5)]
        off = plan_prefetch(plan(queue, nodes, max_loads_per_node=1))
        assert off.loads == ()
        options = PrefetchOptions(max_loads_per_node=1, seed_copies=True)
        on = plan_prefetch(PrefetchInput(queue, nodes, NOW, options))
        assert [(load.dataset, load.node, load.job) for load in on.loads] == [
            ("nowhere", "roomy", "j2")
        ]

    def test_cache_policy_nodes_replicas_and_size_are_kept(self) -> None:
        nodes = [
            NodeCache("a", 100 * G, (entry("shared", 1),)),
            NodeCache("b", 100 * G),
            NodeCache("tiny", 1 * G),
        ]
        queue = [
            job("j1", "restricted", 5, "a", "b", cacheable_on=frozenset({"b"})),
            job("j2", "shared", 1, "b", max_replicas=1),
            job("j3", "huge", 50, "tiny"),
        ]
        result = plan_prefetch(plan(queue, nodes, max_loads_per_node=9))
        assert [(load.dataset, load.node) for load in result.loads] == [("restricted", "b")]
        reasons = {(s.dataset, s.node): s.reason for s in result.skipped}
        assert reasons == {
            ("restricted", "a"): "its cache policy keeps it off this node",
            ("shared", "b"): "1 replicas already",
            ("huge", "tiny"): "larger than the node's cache",
        }


class TestEvictions:
    def test_never_evicts_in_use_pinned_or_loading_data(self) -> None:
        node = NodeCache(
            "a",
            30 * G,
            (
                entry("reading", 10, in_use=True),
                entry("pinned", 10, pinned=True),
                entry("filling", 5, complete=False, loading=True, size_bytes=10 * G),
            ),
        )
        result = plan_prefetch(plan([job("j1", "new", 5, "a")], [node]))
        assert result.loads == () and result.evictions == ()
        assert result.skipped[0].reason == "no room: what is there may not be evicted"

    def test_makes_room_with_the_stalest_unneeded_entry(self) -> None:
        node = NodeCache(
            "a",
            20 * G,
            (
                entry("old", 5, last_used=NOW - 86_400),
                entry("recent", 5, last_used=NOW - 60),
                entry("wanted", 5, last_used=NOW - 86_400),
            ),
        )
        queue = [job("j1", "new", 8, "a"), job("j2", "wanted", 5)]
        result = plan_prefetch(plan(queue, [node]))
        assert [e.dataset for e in result.evictions] == ["old"]
        assert [load.dataset for load in result.loads] == ["new"]

    def test_a_later_job_never_evicts_what_a_job_ahead_needs_there(self) -> None:
        node = NodeCache("a", 10 * G, (entry("ahead", 8, last_used=0.0),))
        queue = [job("j1", "ahead", 8, "a"), job("j2", "behind", 8, "a")]
        result = plan_prefetch(plan(queue, [node]))
        assert result.evictions == () and result.loads == ()
        assert [s.job for s in result.skipped] == ["j2"]

    def test_expired_entries_go_unless_read(self) -> None:
        node = NodeCache(
            "a",
            100 * G,
            (
                entry("done", 1, expires_at=NOW - 1, pinned=True),
                entry("read", 1, expires_at=NOW - 1, in_use=True),
                entry("fresh", 1, expires_at=NOW + 1),
            ),
        )
        result = plan_prefetch(plan([], [node]))
        assert [(e.dataset, e.reason) for e in result.evictions] == [("done", "expired")]

    def test_an_expired_copy_a_head_job_needs_there_is_resumed_not_dropped(self) -> None:
        stale = entry("d", 3, complete=False, expires_at=NOW - 1)
        node = NodeCache("a", 100 * G, (stale,))
        result = plan_prefetch(plan([job("j1", "d", 10, "a")], [node]))
        assert result.evictions == ()
        assert [(load.dataset, load.bytes) for load in result.loads] == [("d", 7 * G)]

    def test_score_counts_recency_size_demand_and_pins(self) -> None:
        options = PrefetchOptions()
        old = eviction_score(entry("d", 4, last_used=NOW - 7200), NOW, 0, options)
        new = eviction_score(entry("d", 4, last_used=NOW), NOW, 0, options)
        big = eviction_score(entry("d", 16, last_used=NOW), NOW, 0, options)
        wanted = eviction_score(entry("d", 4, last_used=NOW - 7200), NOW, 2, options)
        assert old is not None and new is not None and big is not None and wanted is not None
        assert old > new and big > new and wanted < old
        assert eviction_score(entry("d", 4, pinned=True), NOW, 0, options) is None
        assert eviction_score(entry("d", 4, in_use=True), NOW, 0, options) is None

    def test_choose_evictions_for_a_read_on_demand(self) -> None:
        node = NodeCache("a", 10 * G, (entry("x", 4), entry("y", 4, in_use=True)))
        assert choose_evictions(node, 2 * G, NOW) == []
        chosen = choose_evictions(node, 5 * G, NOW)
        assert chosen is not None and [e.dataset for e in chosen] == ["x"]
        assert choose_evictions(node, 5 * G, NOW, protected={"x"}) is None
        assert choose_evictions(node, 9 * G, NOW) is None
