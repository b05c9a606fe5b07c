"""Fair share over the queue tree: hand-worked tables (batch/fairshare.py).

Each case is a tree (nodes in creation order), demands per leaf, the capacity and the fair
share expected of each node, worked out by hand from the rules in the module docstring.
GPU amounts are in GPUs here; ``g(n)`` turns them into model units.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest

from aipaas.scheduler.batch.fairshare import demands, fair_shares
from aipaas.scheduler.batch.fairshare_split import largest_remainder
from aipaas.scheduler.batch.model import NO_LIMIT, Job, QueueNode, Resources, Task
from aipaas.scheduler.batch.options import BatchOptions
from aipaas.scheduler.batch.session import Session
from aipaas.scheduler.framework.types import Placement, PodRequest


def g(n: float, cpu: float = 0) -> Resources:
    return Resources(gpu_milli=round(n * 1000), cpu_milli=round(cpu * 1000))


def unbounded_but(gpu: float) -> Resources:
    return Resources(
        round(gpu * 1000), NO_LIMIT.cpu_milli, NO_LIMIT.memory_mib, NO_LIMIT.gpu_memory_mib
    )


def tree(*nodes: tuple[str, str | None, dict[str, Any]]) -> dict[str, QueueNode]:
    """Nodes as (key, parent, fields), created in the order given; the root comes first."""
    out = {"": QueueNode(key="", parent=None, tenant="")}
    for created, (key, parent, fields) in enumerate(nodes, start=1):
        out[key] = QueueNode(
            key=key, parent=parent, tenant=key.split("/")[0], created=created, **fields
        )
    return out


def gpu_shares(shares: dict[str, Resources]) -> dict[str, float]:
    return {k: v.gpu_milli / 1000 for k, v in shares.items() if k}


@dataclass
class Case:
    name: str
    nodes: list[tuple[str, str | None, dict[str, Any]]]
    demand: dict[str, float]
    capacity: float
    expected: dict[str, float]
    options: BatchOptions = field(default_factory=BatchOptions)


T1: tuple[str, str | None, dict[str, Any]] = ("t", "", {})
CASES = [
    Case(
        "equal weights split evenly",
        [T1, ("t/a", "t", {}), ("t/b", "t", {})],
        {"t/a": 8, "t/b": 8},
        8,
        {"t": 8, "t/a": 4, "t/b": 4},
    ),
    Case(
        "weights 1:2",
        [T1, ("t/a", "t", {}), ("t/b", "t", {"weight": 2})],
        {"t/a": 9, "t/b": 9},
        9,
        {"t": 9, "t/a": 3, "t/b": 6},
    ),
    Case(
        "largest remainder: 3 GPUs over 2 equal queues, the odd one to the first created",
        [T1, ("t/a", "t", {}), ("t/b", "t", {})],
        {"t/a": 3, "t/b": 3},
        3,
        {"t": 3, "t/a": 2, "t/b": 1},
    ),
    Case(
        "largest remainder follows creation, not the name",
        [T1, ("t/b", "t", {}), ("t/a", "t", {})],
        {"t/a": 3, "t/b": 3},
        3,
        {"t": 3, "t/a": 1, "t/b": 2},
    ),
    Case(
        "largest remainder: 7 over weights 1:1:1 -> 3/2/2, 10 over 1:2:2 -> 2/4/4",
        [T1, ("t/a", "t", {}), ("t/b", "t", {"weight": 2}), ("t/c", "t", {"weight": 2})],
        {"t/a": 10, "t/b": 10, "t/c": 10},
        10,
        {"t": 10, "t/a": 2, "t/b": 4, "t/c": 4},
    ),
    Case(
        "guarantee first, then the rest by weight: a 6 + 2, b 2",
        [T1, ("t/a", "t", {"guaranteed": g(6)}), ("t/b", "t", {})],
        {"t/a": 10, "t/b": 10},
        10,
        {"t": 10, "t/a": 8, "t/b": 2},
    ),
    Case(
        "demand below the guarantee: a gets its demand, b the rest",
        [T1, ("t/a", "t", {"guaranteed": g(6)}), ("t/b", "t", {})],
        {"t/a": 2, "t/b": 10},
        10,
        {"t": 10, "t/a": 2, "t/b": 8},
    ),
    Case(
        "guarantees above capacity: served in creation order",
        [T1, ("t/a", "t", {"guaranteed": g(3)}), ("t/b", "t", {"guaranteed": g(3)})],
        {"t/a": 5, "t/b": 5},
        4,
        {"t": 4, "t/a": 3, "t/b": 1},
    ),
    Case(
        "quota caps a queue and its excess is divided again",
        [T1, ("t/a", "t", {"quota": unbounded_but(2)}), ("t/b", "t", {}), ("t/c", "t", {})],
        {"t/a": 10, "t/b": 10, "t/c": 10},
        12,
        {"t": 12, "t/a": 2, "t/b": 5, "t/c": 5},
    ),
    Case(
        "demand caps like quota: small queue satisfied, the others share the rest",
        [T1, ("t/a", "t", {}), ("t/b", "t", {}), ("t/c", "t", {})],
        {"t/a": 1, "t/b": 10, "t/c": 10},
        8,
        {"t": 8, "t/a": 1, "t/b": 4, "t/c": 3},
    ),
    Case(
        "higher priority group is served to its demand first",
        [T1, ("t/a", "t", {"priority": 1}), ("t/b", "t", {}), ("t/c", "t", {})],
        {"t/a": 6, "t/b": 10, "t/c": 10},
        10,
        {"t": 10, "t/a": 6, "t/b": 2, "t/c": 2},
    ),
    Case(
        "guarantees come before priority; the last unit to the first created",
        [
            T1,
            ("t/a", "t", {"priority": 1}),
            ("t/b", "t", {"guaranteed": g(3)}),
            ("t/c", "t", {}),
        ],
        {"t/a": 6, "t/b": 10, "t/c": 10},
        10,
        {"t": 10, "t/a": 6, "t/b": 4, "t/c": 0},
    ),
    Case(
        "nested sub-queues divide their parent's share",
        [
            ("t1", "", {}),
            ("t2", "", {}),
            ("t1/p", "t1", {}),
            ("t1/x", "t1/p", {}),
            ("t1/y", "t1/p", {"weight": 3}),
            ("t2/z", "t2", {}),
        ],
        {"t1/x": 10, "t1/y": 10, "t2/z": 10},
        16,
        {"t1": 8, "t2": 8, "t1/p": 8, "t1/x": 2, "t1/y": 6, "t2/z": 8},
    ),
    Case(
        "tenant weights: more queues gain a tenant nothing",
        [
            ("t1", "", {"weight": 3}),
            ("t2", "", {}),
            ("t1/a", "t1", {}),
            ("t1/b", "t1", {}),
            ("t1/c", "t1", {}),
            ("t2/d", "t2", {}),
            ("t2/e", "t2", {}),
            ("t2/f", "t2", {}),
            ("t2/g", "t2", {}),
        ],
        {k: 8 for k in ("t1/a", "t1/b", "t1/c", "t2/d", "t2/e", "t2/f", "t2/g")},
        8,
        {
            "t1": 6,
            "t2": 2,
            "t1/a": 2,
            "t1/b": 2,
            "t1/c": 2,
            "t2/d": 1,
            "t2/e": 1,
            "t2/f": 0,
            "t2/g": 0,
        },
    ),
    Case(
        "a tenant's guarantee is the sum of its queues' when larger than its own",
        [
            ("t1", "", {}),
            ("t2", "", {}),
            ("t1/a", "t1", {"guaranteed": g(4)}),
            ("t1/b", "t1", {"guaranteed": g(2)}),
            ("t2/c", "t2", {}),
        ],
        {"t1/a": 5, "t1/b": 5, "t2/c": 10},
        10,
        {"t1": 8, "t2": 2, "t1/a": 5, "t1/b": 3, "t2/c": 2},
    ),
    Case(
        "a tenant's quota caps its queues",
        [
            ("t1", "", {"quota": unbounded_but(3)}),
            ("t2", "", {}),
            ("t1/a", "t1", {}),
            ("t1/b", "t1", {}),
            ("t2/c", "t2", {}),
        ],
        {"t1/a": 10, "t1/b": 10, "t2/c": 10},
        10,
        {"t1": 3, "t2": 7, "t1/a": 2, "t1/b": 1, "t2/c": 7},
    ),
    Case(
        "fractional demand gets exactly its demand; the other queue the rest",
        [T1, ("t/a", "t", {}), ("t/b", "t", {})],
        {"t/a": 0.5, "t/b": 10},
        4,
        {"t": 4, "t/a": 0.5, "t/b": 3.5},
    ),
    Case(
        "no demand, no share (the root keeps the capacity)",
        [T1, ("t/a", "t", {"guaranteed": g(2)})],
        {},
        8,
        {"t": 0, "t/a": 0},
    ),
    Case(
        "decayed usage: 3/4 of the usage on half the weight -> weights 2^-1.5 : 2^-0.5 = 1:2",
        [
            T1,
            ("t/a", "t", {"usage_half_life": 3600.0, "decayed_usage": g(3)}),
            ("t/b", "t", {"usage_half_life": 3600.0, "decayed_usage": g(1)}),
        ],
        {"t/a": 9, "t/b": 9},
        9,
        {"t": 9, "t/a": 3, "t/b": 6},
    ),
    Case(
        "decayed usage is ignored when the profile turns usage over time off",
        [
            T1,
            ("t/a", "t", {"usage_half_life": 3600.0, "decayed_usage": g(3)}),
            ("t/b", "t", {"usage_half_life": 3600.0, "decayed_usage": g(1)}),
        ],
        {"t/a": 9, "t/b": 9},
        9,
        {"t": 9, "t/a": 5, "t/b": 4},
        BatchOptions(usageOverTime=False),
    ),
    Case(
        "decayed usage counts only where a half-life is set",
        [
            T1,
            ("t/a", "t", {"decayed_usage": g(3)}),
            ("t/b", "t", {"decayed_usage": g(1)}),
        ],
        {"t/a": 9, "t/b": 9},
        9,
        {"t": 9, "t/a": 5, "t/b": 4},
    ),
    Case(
        "proportion: every leaf by its own weight, tenants and guarantees ignored",
        [
            ("t1", "", {"weight": 3}),
            ("t2", "", {}),
            ("t1/a", "t1", {"guaranteed": g(9)}),
            ("t1/b", "t1", {}),
            ("t2/c", "t2", {"priority": 5}),
        ],
        {"t1/a": 9, "t1/b": 9, "t2/c": 9},
        9,
        {"t1": 6, "t2": 3, "t1/a": 3, "t1/b": 3, "t2/c": 3},
        BatchOptions(fairShare="proportion"),
    ),
    Case(
        "proportion still caps by quota and redivides",
        [T1, ("t/a", "t", {"quota": unbounded_but(1)}), ("t/b", "t", {})],
        {"t/a": 9, "t/b": 9},
        9,
        {"t": 9, "t/a": 1, "t/b": 8},
        BatchOptions(fairShare="proportion"),
    ),
    Case(
        "fifo: every node its demand capped by its quota",
        [
            ("t", "", {"quota": unbounded_but(12)}),
            ("t/a", "t", {"quota": unbounded_but(4)}),
            ("t/b", "t", {}),
        ],
        {"t/a": 10, "t/b": 10},
        8,
        {"t": 12, "t/a": 4, "t/b": 10},
        BatchOptions(fairShare="fifo"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fair_share_table(case: Case) -> None:
    queues = tree(*case.nodes)
    demand = {k: g(v) for k, v in case.demand.items()}
    shares = fair_shares(queues, demand, g(case.capacity), 0.0, case.options)
    assert set(shares) == set(queues)
    assert gpu_shares(shares) == case.expected


def test_root_keeps_the_capacity() -> None:
    queues = tree(T1, ("t/a", "t", {}))
    shares = fair_shares(queues, {"t/a": g(1)}, g(8), 0.0, BatchOptions())
    assert shares[""] == g(8)


def test_resources_are_divided_independently() -> None:
    queues = tree(T1, ("t/a", "t", {}), ("t/b", "t", {}))
    demand = {"t/a": g(4, cpu=2), "t/b": g(4, cpu=20)}
    shares = fair_shares(queues, demand, g(4, cpu=10), 0.0, BatchOptions())
    assert shares["t/a"] == g(2, cpu=2)
    assert shares["t/b"] == g(2, cpu=8)


def test_memory_is_divided_in_mib() -> None:
    queues = tree(T1, ("t/a", "t", {}), ("t/b", "t", {}))
    demand = {"t/a": Resources(memory_mib=10), "t/b": Resources(memory_mib=10)}
    shares = fair_shares(queues, demand, Resources(memory_mib=3), 0.0, BatchOptions())
    assert shares["t/a"].memory_mib == 2
    assert shares["t/b"].memory_mib == 1


def test_cpu_halves_where_demands_come_in_half_cores() -> None:
    # 2.5 cores of demand each over 3 cores: the demands come in half cores, so the unit of
    # division is half a core and equal weights get 1.5/1.5 (the decision on fractional
    # shares: whole units would give 2/1, one queue a core short of its equal share,
    # as a 0.5-GPU queue got 0 of one shared GPU). Whole-core demands keep whole cores (below).
    queues = tree(T1, ("t/a", "t", {}), ("t/b", "t", {}))
    demand = {"t/a": g(0, cpu=2.5), "t/b": g(0, cpu=2.5)}
    shares = fair_shares(queues, demand, g(0, cpu=3), 0.0, BatchOptions())
    assert (shares["t/a"].cpu_milli, shares["t/b"].cpu_milli) == (1500, 1500)


def test_cpu_whole_cores_by_largest_remainder() -> None:
    # 3 cores of demand each over 5 cores: whole cores 3/2 (largest remainder, ties to the
    # first created), never 2.5/2.5.
    queues = tree(T1, ("t/a", "t", {}), ("t/b", "t", {}))
    demand = {"t/a": g(0, cpu=3), "t/b": g(0, cpu=3)}
    shares = fair_shares(queues, demand, g(0, cpu=5), 0.0, BatchOptions())
    assert (shares["t/a"].cpu_milli, shares["t/b"].cpu_milli) == (3000, 2000)


def test_shares_never_exceed_demand_nor_the_parent() -> None:
    queues = tree(
        ("t1", "", {"guaranteed": g(5)}),
        ("t2", "", {"weight": 2}),
        ("t1/a", "t1", {"guaranteed": g(5)}),
        ("t1/b", "t1", {"priority": 2}),
        ("t2/c", "t2", {"quota": unbounded_but(3)}),
        ("t2/d", "t2", {}),
    )
    demand = {"t1/a": g(7), "t1/b": g(1.5), "t2/c": g(9), "t2/d": g(4)}
    shares = fair_shares(queues, demand, g(13), 0.0, BatchOptions())
    for key, share in shares.items():
        if key in demand:
            assert share.gpu_milli <= demand[key].gpu_milli
    assert shares["t1"].gpu_milli + shares["t2"].gpu_milli == 13000
    assert shares["t1/a"].gpu_milli + shares["t1/b"].gpu_milli == shares["t1"].gpu_milli
    assert shares["t2/c"].gpu_milli + shares["t2/d"].gpu_milli == shares["t2"].gpu_milli


def test_queue_on_a_cycle_of_parents_does_not_break_the_computation() -> None:
    queues = tree(T1, ("t/a", "t", {}))
    queues["t/x"] = QueueNode(key="t/x", parent="t/y", tenant="t", created=5)
    queues["t/y"] = QueueNode(key="t/y", parent="t/x", tenant="t", created=6)
    shares = fair_shares(queues, {"t/a": g(2), "t/x": g(2)}, g(4), 0.0, BatchOptions())
    assert shares["t/a"] == g(2)
    assert shares["t/x"] == Resources()


@pytest.mark.parametrize(
    ("units", "weights", "expected"),
    [
        (3, [1.0, 1.0], [2, 1]),
        (7, [1.0, 1.0, 1.0], [3, 2, 2]),
        (10, [1.0, 2.0, 2.0], [2, 4, 4]),
        (1, [1.0, 1.0, 1.0], [1, 0, 0]),
        (5, [0.1, 0.2, 0.2], [1, 2, 2]),
        (4, [1.0, 3.0], [1, 3]),
    ],
)
def test_largest_remainder(units: int, weights: list[float], expected: list[int]) -> None:
    assert largest_remainder(units, weights) == expected


def _task(name: str, gpus: int, running: bool) -> Task:
    request = PodRequest(name, 1000, 256, gpus, 1000 if gpus else 0)
    placement = Placement(name, "n1", 0, tuple(range(gpus)), 1000, 1000, 256) if running else None
    return Task(name, request, placement, 0.0 if running else None)


def test_demands_add_what_runs_and_what_waits_per_leaf() -> None:
    jobs = [
        Job("t/j1", "t", "t/a", [_task("w-0", 2, True), _task("w-1", 2, False)]),
        Job("t/j2", "t", "t/a", [_task("w-0", 1, False)]),
        Job("t/j3", "t", "t/b", [_task("w-0", 4, True)]),
    ]
    session = cast(Session, SimpleNamespace(jobs={j.key: j for j in jobs}))
    got = demands(session)
    assert got == {"t/a": Resources(5000, 3000, 768), "t/b": Resources(4000, 1000, 256)}
