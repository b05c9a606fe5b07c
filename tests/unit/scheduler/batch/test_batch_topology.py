"""Topology for gangs: a whole gang inside one domain of a level, the fullest that fits;
preferred falls back to anywhere; refusals say how large the largest free domain is."""

from __future__ import annotations

from aipaas.scheduler.batch.model import Node, Resources
from aipaas.scheduler.batch.options import BatchOptions
from aipaas.scheduler.batch.run import decide
from aipaas.scheduler.batch.topology import domains, level_name
from tests.unit.scheduler.batch.batch_alloc_builders import (
    job,
    node,
    nodes_of,
    queue,
    session,
    started,
    tree,
)

ONLY = BatchOptions(actions=("enqueue", "allocate"))
Q = tree(queue("t"), queue("t/a"))
SHARES = {"t": Resources(10**6, 10**9, 10**9), "t/a": Resources(10**6, 10**9, 10**9)}


def racks() -> list[Node]:
    """r1: n1, n2 (4 GPUs each); r2: n3 (4 GPUs); n4 (8 GPUs) in no rack."""
    return [
        node("n1", gpu=4, rack="r1"),
        node("n2", gpu=4, rack="r1"),
        node("n3", gpu=4, rack="r2"),
        node("n4", gpu=8),
    ]


def test_level_names_and_domains() -> None:
    assert level_name("topology.aipaas.dev/rack") == "rack"
    assert level_name("example.com.block") == "block"
    assert level_name("zone") == "zone"
    grouped = domains(racks(), "topology.aipaas.dev/rack")
    assert grouped == {"r1": ["n1", "n2"], "r2": ["n3"]}


def test_required_takes_the_fullest_rack_that_fits() -> None:
    """r1 has 8 free, r2 4, n4 (no rack) 8: a 4-GPU gang goes to r2 (least free that fits),
    keeping r1 whole; never to n4 although the framework's best fit might like it."""
    g = job("t/g", "t/a", tasks=4, required="rack")
    d = decide(session(racks(), Q, [g], fair_share=SHARES, options=ONLY))
    assert set(nodes_of(d, "t/g").values()) == {"n3"}


def test_required_skips_racks_too_small_and_packs_into_one_rack() -> None:
    """A 6-GPU gang: r2 (4) is too small; r1 (8) holds it across n1 and n2."""
    g = job("t/g", "t/a", tasks=6, required="rack")
    d = decide(session(racks(), Q, [g], fair_share=SHARES, options=ONLY))
    assert set(nodes_of(d, "t/g").values()) == {"n1", "n2"}


def test_required_refuses_with_the_largest_free_rack() -> None:
    """r1 runs 6 (2 free), r2 runs 1 (3 free); n4 idle. The 4-GPU gang would fit in the
    cluster, not in one rack: Topology, with the numbers."""
    busy = job("t/busy", "t/a", tasks=6)
    other = job("t/other", "t/a")
    g = job("t/g", "t/a", tasks=4, required="rack")
    running = {"t/busy": ["n1"] * 4 + ["n2"] * 2, "t/other": ["n3"]}
    d = decide(session(racks(), Q, [busy, other, g], running, fair_share=SHARES, options=ONLY))
    assert d.started == []
    assert d.reasons["t/g"] == (
        "Topology",
        "waiting for a 4-GPU gang inside one rack; the largest free rack has 3",
    )


def test_preferred_falls_back_to_anywhere() -> None:
    """Same state, preferred: no rack holds 4, so the gang goes wherever the profile puts it
    (best fit: the nearly full nodes n2 and n3, across racks)."""
    busy = job("t/busy", "t/a", tasks=6)
    other = job("t/other", "t/a")
    g = job("t/g", "t/a", tasks=4, preferred="rack")
    running = {"t/busy": ["n1"] * 4 + ["n2"] * 2, "t/other": ["n3"]}
    d = decide(session(racks(), Q, [busy, other, g], running, fair_share=SHARES, options=ONLY))
    assert started(d) == {"t/g": ["w-0", "w-1", "w-2", "w-3"]}
    assert "t/g" not in d.reasons


def test_preferred_uses_a_rack_when_one_fits() -> None:
    g = job("t/g", "t/a", tasks=3, preferred="rack")
    d = decide(session(racks(), Q, [g], fair_share=SHARES, options=ONLY))
    assert set(nodes_of(d, "t/g").values()) == {"n3"}


def test_equal_free_gpus_go_to_less_free_cpu_then_by_name() -> None:
    """r1 and r2 both have 4 free GPUs; r2's node has 32 cores, r1's 64: r2 is fuller."""
    nodes = [node("a1", gpu=4, cpu=64, rack="r1"), node("b1", gpu=4, cpu=32, rack="r2")]
    g = job("t/g", "t/a", tasks=2, required="rack")
    d = decide(session(nodes, Q, [g], fair_share=SHARES, options=ONLY))
    assert set(nodes_of(d, "t/g").values()) == {"b1"}
    nodes = [node("a1", gpu=4, rack="r9"), node("b1", gpu=4, rack="r1")]
    g = job("t/g", "t/a", tasks=2, required="rack")
    d = decide(session(nodes, Q, [g], fair_share=SHARES, options=ONLY))
    assert set(nodes_of(d, "t/g").values()) == {"b1"}  # r1 sorts before r9


def test_a_gang_larger_than_every_rack_waits_at_enqueue() -> None:
    """Racks hold 8 and 4 GPUs when empty: a 10-GPU gang can never fit in one."""
    g = job("t/g", "t/a", tasks=10, required="rack")
    d = decide(session(racks(), Q, [g], fair_share=SHARES, options=ONLY))
    assert d.reasons["t/g"][0] == "Topology"
    assert "inside one rack; no rack is that large" in d.reasons["t/g"][1]


def test_elastic_extras_stay_in_the_gang_rack() -> None:
    """e runs w-0 on n3 (rack r2, 4 GPUs), 6 tasks, minAvailable 1, rack required: the
    extras fill r2 (3 more) and do not spill into r1 or n4."""
    e = job("t/e", "t/a", tasks=6, min_available=1, required="rack")
    s = session(racks(), Q, [e], {"t/e": ["n3"]}, fair_share=SHARES, options=ONLY)
    d = decide(s)
    assert started(d) == {"t/e": ["w-1", "w-2", "w-3"]}
    assert set(nodes_of(d, "t/e").values()) == {"n3"}


def test_each_start_changes_which_rack_is_fullest() -> None:
    """Four 4-GPU gangs, rack required: g1 takes r2 (4 free, the fullest that fits), g2 and g3
    fill r1 (8 free, then 4), g4 finds no rack with room: the largest free rack has 0."""
    gangs = [job(f"t/g{i}", "t/a", tasks=4, required="rack") for i in range(1, 5)]
    d = decide(session(racks(), Q, gangs, fair_share=SHARES, options=ONLY))
    assert set(nodes_of(d, "t/g1").values()) == {"n3"}
    assert set(nodes_of(d, "t/g2").values()) | set(nodes_of(d, "t/g3").values()) == {"n1", "n2"}
    assert d.reasons["t/g4"] == (
        "Topology",
        "waiting for a 4-GPU gang inside one rack; the largest free rack has 0",
    )


def test_an_8_gpu_gang_reads_right() -> None:
    """Two racks of 4 GPUs (and an 8-GPU rack that is busy): 'an 8-GPU gang'."""
    nodes = [node("n1", gpu=8, rack="r1"), node("n2", gpu=4, rack="r2")]
    busy = job("t/busy", "t/a", tasks=1)
    g = job("t/g", "t/a", tasks=8, required="rack")
    d = decide(session(nodes, Q, [busy, g], {"t/busy": ["n1"]}, fair_share=SHARES, options=ONLY))
    assert d.reasons["t/g"] == (
        "Topology",
        "waiting for an 8-GPU gang inside one rack; the largest free rack has 7",
    )
