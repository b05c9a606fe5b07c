"""Levels above a preferred topology level (batch/topology.py ``coarser_levels``): a preferred
gang that fits in no domain of its level falls back to the next coarser level before anywhere,
as KAI-Scheduler's and Kueue's preferred topology do. Expected levels worked out by hand."""

from __future__ import annotations

from aipaas.scheduler.batch.model import Node
from aipaas.scheduler.batch.topology import coarser_levels

P = "topology.aipaas.dev/"


def _node(name: str, **labels: str) -> Node:
    return Node(name, 4, 64_000, 512 * 1024, labels={P + k: v for k, v in labels.items()})


NODES = [
    _node("n1", zone="z1", block="b1", rack="r1", spread="s1"),
    _node("n2", zone="z1", block="b1", rack="r2", spread="s2"),
    _node("n3", zone="z1", block="b2", rack="r3", spread="s1"),
    _node("n4", zone="z1", block="b2", rack="r4", spread="s2"),
]


def test_levels_above_a_rack_finer_first() -> None:
    """Racks r1..r4 lie inside blocks (2 domains) and the zone (1): block first, then zone.
    spread crosses the blocks (r1 and r3 share s1): each rack is inside one spread domain, and
    there are 2 of them, so it counts as a level too, tied with block and ordered by key."""
    assert coarser_levels(NODES, P + "rack") == [P + "block", P + "spread", P + "zone"]


def test_a_level_crossing_the_domains_is_not_above() -> None:
    """Blocks b1 = {n1, n2}, b2 = {n3, n4}; spread puts n1 and n2 in different domains: not
    above block. Only the zone is."""
    assert coarser_levels(NODES, P + "block") == [P + "zone"]


def test_the_coarsest_level_and_other_prefixes() -> None:
    """Nothing is above the zone (one domain). Labels under another prefix are never levels of
    this one, and a node lacking a key rules that key out."""
    assert coarser_levels(NODES, P + "zone") == []
    other = [
        Node("m1", 4, 64_000, 1024, labels={P + "rack": "r1", "example.com/room": "a"}),
        Node("m2", 4, 64_000, 1024, labels={P + "rack": "r2", "example.com/room": "a"}),
        Node("m3", 4, 64_000, 1024, labels={P + "rack": "r3", P + "block": "b1"}),
    ]
    assert coarser_levels(other, P + "rack") == []
    assert coarser_levels(other, "unprefixed") == []
