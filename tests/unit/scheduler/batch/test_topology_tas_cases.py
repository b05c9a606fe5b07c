# ruff: noqa: E501  (a table reads better with one case per line)
"""Gangs in a topology as Kueue's topology-aware scheduling packs them: cases shaped after
Kueue's TestFindTopologyAssignments (pkg/cache/tas_flavor_snapshot_test.go), run through
``place_in_domain`` on a SnapshotCluster. Every expected answer was worked out by hand.

The cluster (1 GPU per pod unless a case says otherwise; CPU and memory never bind):

    block b1: rack r1: x1 (4 GPUs), x2 (2)     rack r2: x3 (1), x4 (1)
    block b2: rack r3: x5 (4), x6 (4)          rack r4: x7 (3)

so the pods each domain can take are r1 6, r2 2, r3 8, r4 3, b1 8, b2 11.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

from aipaas.scheduler.batch.cluster import SnapshotCluster
from aipaas.scheduler.batch.model import Node
from aipaas.scheduler.batch.topology import Refusal, finer_levels, place_in_domain
from aipaas.scheduler.batch.topology_tas import assign, build_domains
from aipaas.scheduler.framework.types import PodRequest

P = "topology.aipaas.dev/"
RACK, BLOCK = P + "rack", P + "block"
LAYOUT = [("x1", 4, "b1", "r1"), ("x2", 2, "b1", "r1"), ("x3", 1, "b1", "r2"), ("x4", 1, "b1", "r2"),
          ("x5", 4, "b2", "r3"), ("x6", 4, "b2", "r3"), ("x7", 3, "b2", "r4")]  # fmt: skip


def nodes(layout: Sequence[tuple[str, int, str, str]] = LAYOUT) -> list[Node]:
    return [
        Node(name, gpus, 64_000, 512 * 1024, gpu_model="H100", labels={BLOCK: b, RACK: r})
        for name, gpus, b, r in layout
    ]


def pods(count: int, *, gpu: int = 1, milli: int = 1000, cpu: int = 1000) -> list[PodRequest]:
    return [
        PodRequest(f"w-{i}", cpu, 1024, gpu_count=gpu, gpu_milli=milli if gpu else 0)
        for i in range(count)
    ]


# (upstream case, gang, level, required, allowed nodes, want pods per node | want refusal)
CASES = [
    pytest.param("TestFindTopologyAssignments/rack required; multiple Pods fit in a rack", pods(2), RACK, True, None,
                 {"x3": 1, "x4": 1}, id="rack required: the rack that fits with the least room (r2)"),
    pytest.param("TestFindTopologyAssignments/rack required; single node holds the Pods", pods(3), RACK, True, None,
                 {"x7": 3}, id="rack required: three pods, best fit r4 on one node"),
    pytest.param("TestFindTopologyAssignments/choose the node that can accommodate all Pods", pods(4), RACK, True, None,
                 {"x1": 4}, id="rack required: four pods on the one node that holds them"),
    pytest.param("TestFindTopologyAssignments/rack required; multiple Pods fit in a rack", pods(5), RACK, True, None,
                 {"x1": 4, "x2": 1}, id="rack required: five pods, fewest nodes in r1"),
    pytest.param("TestFindTopologyAssignments/rack required; multiple Pods fit in a rack", pods(6), RACK, True, None,
                 {"x1": 4, "x2": 2}, id="rack required: six pods fill r1 exactly"),
    pytest.param("TestFindTopologyAssignments/rack required; multiple Pods fit in a rack", pods(7), RACK, True, None,
                 {"x5": 4, "x6": 3}, id="rack required: seven pods, only r3 holds them"),
    pytest.param("TestFindTopologyAssignments/rack required; too many pods to fit in any rack", pods(9), RACK, True, None,
                 Refusal("Topology", "waiting for a 9-GPU gang inside one rack; the largest free rack has 8"),
                 id="rack required: no rack holds nine"),
    pytest.param("TestFindTopologyAssignments/block required; Pods fit in a block spread across two racks", pods(4), BLOCK, True, None,
                 {"x1": 4}, id="block required: fewest racks, then fewest nodes (one of each)"),
    pytest.param("TestFindTopologyAssignments/block required; Pods fit in a block spread across two racks", pods(7), BLOCK, True, None,
                 {"x1": 4, "x2": 2, "x3": 1}, id="block required: r1 whole and one pod in r2"),
    pytest.param("TestFindTopologyAssignments/block required; Pods fit in a block spread across two racks", pods(10), BLOCK, True, None,
                 {"x5": 4, "x6": 4, "x7": 2}, id="block required: ten pods in b2, r3 whole and two in r4"),
    pytest.param("TestFindTopologyAssignments/block required; too many pods", pods(12), BLOCK, True, None,
                 Refusal("Topology", "waiting for a 12-GPU gang inside one block; the largest free block has 11"),
                 id="block required: no block holds twelve"),
    pytest.param("TestFindTopologyAssignments/rack preferred; multiple Pods fit in a rack", pods(5), RACK, False, None,
                 {"x1": 4, "x2": 1}, id="rack preferred: a rack that holds them is used as if required"),
    pytest.param("TestFindTopologyAssignments/rack preferred; fall back to the block", pods(9), RACK, False, None,
                 {"x5": 4, "x6": 4, "x7": 1}, id="rack preferred: no rack holds nine, block b2 does, fewest racks inside"),
    pytest.param("TestFindTopologyAssignments/block preferred; Pods fit in multiple blocks", pods(12), RACK, False, None,
                 {"x1": 4, "x5": 4, "x6": 4}, id="rack preferred: no block holds twelve, fewest blocks then fewest racks"),
    pytest.param("TestFindTopologyAssignments/block preferred; Pods fit in multiple blocks", pods(12), BLOCK, False, None,
                 {"x1": 4, "x5": 4, "x6": 4}, id="block preferred: twelve over the fewest blocks"),
    pytest.param("TestFindTopologyAssignments/rack preferred; too many pods for the topology", pods(20), RACK, False, None,
                 "Unschedulable", id="rack preferred: more pods than the whole cluster takes"),
    pytest.param("TestFindTopologyAssignments/rack required; Pods with two GPUs each", pods(3, gpu=2), RACK, True, None,
                 {"x1": 2, "x2": 1}, id="two whole GPUs a pod: r1 takes 3 (x1 2, x2 1), r3 takes 4"),
    pytest.param("TestFindTopologyAssignments/rack required; Pods with a share of a GPU", pods(3, milli=500), RACK, True, None,
                 {"x3": 2, "x4": 1}, id="half a GPU a pod: r2 takes 4, the best fit for three"),
    pytest.param("TestFindTopologyAssignments/rack required; CPU-only Pods", pods(4, gpu=0, cpu=16_000), RACK, True, None,
                 {"x7": 4}, id="CPU-only pods: four per node, r4 (one node) is the best fit"),
    pytest.param("TestFindTopologyAssignments/rack required; nodes excluded", pods(4), RACK, True, {"x2", "x3", "x4", "x5", "x6", "x7"},
                 {"x5": 4}, id="x1 excluded: r1 takes only 2, so r3"),
    pytest.param("TestFindTopologyAssignments/rack required; single Pod", pods(1), RACK, True, None,
                 {"x3": 1}, id="one pod: the smallest rack, its first node"),
    pytest.param("aipaas: a gang of several shapes keeps the fullest-domain rule", [*pods(1, gpu=2), *pods(1)], RACK, True, None,
                 {"x7": 2}, id="two shapes: the fullest rack that fits (r4), placed by the profile"),
]  # fmt: skip


@pytest.mark.parametrize(("upstream", "gang", "label", "required", "allowed", "want"), CASES)
def test_gang_placement_follows_kueue(
    upstream: str,
    gang: list[PodRequest],
    label: str,
    required: bool,
    allowed: set[str] | None,
    want: dict[str, int] | Refusal | str,
) -> None:
    assert upstream
    engine = SnapshotCluster(nodes())
    placed = place_in_domain(engine, gang, label, allowed, required=required)
    if isinstance(want, Refusal):
        assert placed == want
    elif isinstance(want, str):
        assert isinstance(placed, Refusal)
        assert placed.reason == want
    else:
        assert not isinstance(placed, Refusal), placed
        assert dict(Counter(p.node for p in placed)) == want


def test_table_is_big_enough() -> None:
    assert len(CASES) >= 20


def test_equal_counts_go_to_the_fuller_domain() -> None:
    """aipaas on purpose: r1 and r3 both take 6 once a running pod holds 2 GPUs (and 2 CPUs) of
    x5; Kueue would take r1 (its name sorts first), aipaas the fuller r3 (less free CPU), as
    KAI does, keeping the roomier rack whole. Inside r3: x6 4, then x5 1."""
    engine = SnapshotCluster(nodes())
    running = engine.place(pods(2, cpu=1000), nodes=("x5",))
    assert not isinstance(running, Refusal)
    placed = place_in_domain(engine, pods(5), RACK, None, required=True)
    assert not isinstance(placed, Refusal)
    assert dict(Counter(p.node for p in placed)) == {"x6": 4, "x5": 1}


def test_levels_below_a_block_are_its_racks() -> None:
    assert finer_levels(nodes(), BLOCK) == [RACK]
    assert finer_levels(nodes(), RACK) == []


def test_assign_on_counts_alone() -> None:
    """The pure step: counts given, no engine. Block b1 (8) is the best fit for 8 pods; racks
    r1 6 + r2 2; nodes by count: x1 4, x2 2, x3 1, x4 1."""
    labels = {name: {BLOCK: b, RACK: r} for name, _, b, r in LAYOUT}
    counts = {name: gpus for name, gpus, _, _ in LAYOUT}
    free = {name: (gpus * 1000, 64_000) for name, gpus, _, _ in LAYOUT}
    tree = build_domains([BLOCK, RACK], labels, counts, free)
    assert assign(tree, 0, 8, required=True) == [("x1", 4), ("x2", 2), ("x3", 1), ("x4", 1)]
    assert assign(tree, 1, 9, required=True) == 8


def test_the_worked_example_of_docs_scheduling() -> None:
    layout = [("n1", 4, "b1", "r1"), ("n2", 4, "b1", "r1"), ("n3", 4, "b1", "r2"), ("n4", 4, "b1", "r2")]  # fmt: skip
    engine = SnapshotCluster(nodes(layout))
    assert not isinstance(engine.place(pods(4), nodes=("n1",)), Refusal)
    assert not isinstance(engine.place(pods(1), nodes=("n3",)), Refusal)
    assert place_in_domain(engine, pods(8), RACK, None, required=True) == Refusal(
        "Topology", "waiting for an 8-GPU gang inside one rack; the largest free rack has 7"
    )
    first = place_in_domain(engine, pods(4), RACK, None, required=True)
    assert not isinstance(first, Refusal)
    assert dict(Counter(p.node for p in first)) == {"n2": 4}
    second = place_in_domain(engine, pods(6), RACK, None, required=True)
    assert not isinstance(second, Refusal)
    assert dict(Counter(p.node for p in second)) == {"n4": 4, "n3": 2}


def test_minimize_the_number_of_used_racks_before_optimizing_the_number_of_nodes() -> None:
    """Kueue's TestFindTopologyAssignments case of that name: block b1 holds r1 (x1: 2 pods),
    r2 (x2: 2) and r3 (x3..x6: 1 each); 4 pods, block required. The fewest racks is one (r3
    takes 4), so all of r3's nodes, not x1 and x2 across two racks."""
    layout = [("x1", 2, "b1", "r1"), ("x2", 2, "b1", "r2"), ("x3", 1, "b1", "r3"),
              ("x4", 1, "b1", "r3"), ("x5", 1, "b1", "r3"), ("x6", 1, "b1", "r3")]  # fmt: skip
    engine = SnapshotCluster(nodes(layout))
    placed = place_in_domain(engine, pods(4), BLOCK, None, required=True)
    assert not isinstance(placed, Refusal)
    assert dict(Counter(p.node for p in placed)) == {"x3": 1, "x4": 1, "x5": 1, "x6": 1}
