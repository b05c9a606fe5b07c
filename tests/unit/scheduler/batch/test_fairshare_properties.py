"""Properties of fair share over random trees (hypothesis): shares never exceed demand or the
parent's share, the whole of what a parent has goes to its children up to their demands,
guarantees are met when they fit, and equal siblings differ by at most one unit."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aipaas.scheduler.batch.fairshare import UNITS, fair_shares
from aipaas.scheduler.batch.fairshare_split import divide
from aipaas.scheduler.batch.model import NO_LIMIT, UNBOUNDED, QueueNode, Resources
from aipaas.scheduler.batch.options import BatchOptions

amounts = st.integers(min_value=0, max_value=20_000)


@st.composite
def trees(draw: st.DrawFn) -> tuple[dict[str, QueueNode], dict[str, Resources], Resources]:
    queues = {"": QueueNode(key="", parent=None, tenant="")}
    created = 1
    demand: dict[str, Resources] = {}
    for t in range(draw(st.integers(1, 3))):
        tenant = f"t{t}"
        queues[tenant] = _node(draw, tenant, "", tenant, created)
        created += 1
        parents = [tenant]
        for q in range(draw(st.integers(1, 4))):
            key = f"{tenant}/q{q}"
            parent = draw(st.sampled_from(parents))
            queues[key] = _node(draw, key, parent, tenant, created)
            created += 1
            parents.append(key)
    has_children = {q.parent for q in queues.values()}
    for key in queues:
        if key not in has_children and "/" in key:
            demand[key] = Resources(draw(amounts), draw(amounts))
    capacity = Resources(draw(st.integers(0, 40)) * 1000, draw(amounts))
    return queues, demand, capacity


def _node(draw: st.DrawFn, key: str, parent: str, tenant: str, created: int) -> QueueNode:
    quota = draw(st.one_of(st.none(), st.integers(0, 20).map(lambda n: n * 1000)))
    guaranteed = draw(st.integers(0, 6)) * 1000
    if quota is not None:
        guaranteed = min(guaranteed, quota)
    return QueueNode(
        key=key,
        parent=parent,
        tenant=tenant,
        guaranteed=Resources(guaranteed),
        quota=NO_LIMIT if quota is None else Resources(quota, UNBOUNDED, UNBOUNDED, UNBOUNDED),
        weight=draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])),
        priority=draw(st.integers(0, 1)),
        created=created,
    )


def _subtree_demand(queues: dict[str, QueueNode], demand: dict[str, Resources], key: str) -> int:
    """GPU demand under ``key`` capped by every quota on the way (as fairshare.py caps it)."""
    kids = [k for k, q in queues.items() if q.parent == key]
    total = demand.get(key, Resources()).gpu_milli + sum(
        _subtree_demand(queues, demand, k) for k in kids
    )
    return min(total, queues[key].quota.gpu_milli)


@settings(max_examples=150, deadline=None)
@given(trees())
def test_tree_invariants(
    case: tuple[dict[str, QueueNode], dict[str, Resources], Resources],
) -> None:
    queues, demand, capacity = case
    shares = fair_shares(queues, demand, capacity, 0.0, BatchOptions())
    assert shares[""] == capacity
    for key, queue in queues.items():
        if queue.parent is None:
            continue
        share = shares[key]
        assert share.gpu_milli <= _subtree_demand(queues, demand, key)
        assert share.gpu_milli <= queue.quota.gpu_milli
        kids = [k for k, q in queues.items() if q.parent == key]
        if kids:
            given_out = sum(shares[k].gpu_milli for k in kids)
            wanted = sum(_subtree_demand(queues, demand, k) for k in kids)
            # Work-conserving: all of the share goes down, up to what the children want.
            assert given_out == min(share.gpu_milli, wanted)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 50_000),
    st.lists(
        st.tuples(amounts, st.integers(0, 8_000), st.sampled_from([1.0, 2.0]), st.integers(0, 1)),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(UNITS),
)
def test_divide_invariants(
    available: int, children: list[tuple[int, int, float, int]], unit: int
) -> None:
    need = [c[0] for c in children]
    guaranteed = [c[1] for c in children]
    weights = [c[2] for c in children]
    priorities = [c[3] for c in children]
    share = divide(available, need, guaranteed, weights, priorities, unit)
    assert all(0 <= s <= n for s, n in zip(share, need, strict=True))
    assert sum(share) == min(available, sum(need))
    floors = [min(g, n) for g, n in zip(guaranteed, need, strict=True)]
    if sum(floors) <= available:
        assert all(s >= f for s, f in zip(share, floors, strict=True))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 100), st.integers(2, 6))
def test_equal_siblings_differ_by_at_most_one_unit(units: int, count: int) -> None:
    share = divide(units * 1000, [10**9] * count, [0] * count, [1.0] * count, [0] * count, 1000)
    assert max(share) - min(share) <= 1000
    assert all(s % 1000 == 0 for s in share)
    assert share == sorted(share, reverse=True)  # the odd units to the first created
