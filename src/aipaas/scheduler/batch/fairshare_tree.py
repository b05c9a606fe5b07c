"""The fair share rules over the queue tree, computed top-down each cycle from the demand that
exists.

Per node, what it has to divide ("available") is its own fair share; the root's is the
capacity. Among the children of a node, each resource is divided on its own:

- a child's demand is what the leaves under it hold and ask for, capped by its quota at every
  level (a child never gets more than it could hold); its guarantee is the larger of its own
  and the sum of its children's (effective guarantee);
- step 1: each child gets min(guarantee, demand); when the guarantees exceed what is
  available, children are served in creation order;
- step 2: what is left goes to the children still below their demand, the sibling group of the
  highest ``priority`` first (served to its demand before the next group gets anything), by
  weight, water-filling: a child that reaches its demand drops out and the excess is divided
  again among the others.

Amounts are divided in whole units (1 GPU, 1 CPU core, 1 MiB of memory or GPU memory), or
in the finest step the siblings' demands and guarantees use where that is finer (a queue of
0.5-GPU jobs: half GPUs; the greatest common divisor of the numbers): each round splits its
units by the largest remainder method, ties to the child created first. A
share never exceeds the child's demand, so a fractional demand gets exactly its demand. A
remainder below one unit (only when a fraction came down from a fractional demand or quota)
goes to the children still short, in creation order.

Usage over time (``usage_over_time``, the profile's ``usageOverTime``, and a child's
``usage_half_life`` set): its weight in step 2 is multiplied by Slurm's classic fair-share
factor 2^(-U/S), with U the child's decayed usage of the resource as a fraction of its siblings'
total and S its weight as a fraction of its siblings' weights: a queue that used exactly its
share keeps half its weight's pull, one that used nothing keeps it whole, one that used
everything keeps little. The caller decays usage (``QueueNode.decayed_usage``, resource-seconds
at ``now``).

``spec.batch.fairShare`` names the queue order (batch/policy_orders.py) whose ``fair_shares``
says which rule applies: ``drf_shares`` is the above; ``proportion_shares`` is Volcano's
proportion plugin (every leaf directly under the root with its own weight: no guarantees, no
priority, no usage over time; inner nodes report the sum of their leaves); ``demand_shares``
(fifo) gives every node its demand capped by its quota (no fair share at all).

Who calls them: the queue orders (batch/policy_orders.py), through fairshare.py's
``fair_shares`` or a session's own queue order (batch/run.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from aipaas.scheduler.batch.fairshare_split import divide
from aipaas.scheduler.batch.model import QueueNode, Resources

#: the whole unit of each resource, in model units (gpu milli, cpu milli, MiB, MiB)
UNITS: Final = (1000, 1000, 1, 1)
_Vector = tuple[int, int, int, int]
_ZERO: Final[_Vector] = (0, 0, 0, 0)


def demand_shares(
    queues: Mapping[str, QueueNode],
    demand: Mapping[str, Resources],
    capacity: Resources,
    now: float,
    usage_over_time: bool,
) -> dict[str, Resources]:
    """No fair share: every node's demand capped by its quota (fifo)."""
    children = _children(queues)
    capped = _capped_demand(queues, children, _post_order(queues, children), demand)
    return {key: Resources(*capped[key]) for key in queues}


def proportion_shares(
    queues: Mapping[str, QueueNode],
    demand: Mapping[str, Resources],
    capacity: Resources,
    now: float,
    usage_over_time: bool,
) -> dict[str, Resources]:
    """Volcano's proportion: the leaves flat, by weight alone."""
    children = _children(queues)
    order = _post_order(queues, children)
    capped = _capped_demand(queues, children, order, demand)
    return _proportion(queues, children, order, capped, capacity)


def drf_shares(
    queues: Mapping[str, QueueNode],
    demand: Mapping[str, Resources],
    capacity: Resources,
    now: float,
    usage_over_time: bool,
) -> dict[str, Resources]:
    """Down the tree: guarantees, then the rest by priority and weight (and usage over time),
    per resource (drf)."""
    children = _children(queues)
    order = _post_order(queues, children)
    capped = _capped_demand(queues, children, order, demand)
    guaranteed = _effective_guaranteed(queues, children, order)
    shares: dict[str, _Vector] = {}
    for key in reversed(order):  # parents before their children
        parent = _parent(queues, key)
        if parent is None:
            shares[key] = capacity.as_tuple()
        kids = children.get(key)
        if not kids:
            continue
        available = shares[key]
        needs = [capped[c] for c in kids]
        if all(sum(n[r] for n in needs) <= available[r] for r in range(4)):
            for child, need in zip(kids, needs, strict=True):
                shares[child] = need  # every child reaches its demand: nothing to divide
            continue
        weights = _weights(queues, kids, usage_over_time)
        priorities = [queues[c].priority for c in kids]
        split = [
            divide(
                available[r],
                [n[r] for n in needs],
                [guaranteed[c][r] for c in kids],
                weights[r],
                priorities,
                UNITS[r],
            )
            for r in range(4)
        ]
        for i, child in enumerate(kids):
            shares[child] = (split[0][i], split[1][i], split[2][i], split[3][i])
    return {key: Resources(*shares.get(key, _ZERO)) for key in queues}


# --- the tree ----------------------------------------------------------------------------


def _parent(queues: Mapping[str, QueueNode], key: str) -> str | None:
    """The node's parent when it is in the tree (a node whose parent is missing is a root)."""
    parent = queues[key].parent
    return parent if parent is not None and parent in queues and parent != key else None


def _by_creation(queues: Mapping[str, QueueNode], keys: Iterable[str]) -> list[str]:
    return sorted(keys, key=lambda k: (queues[k].created, k))


def _children(queues: Mapping[str, QueueNode]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key in _by_creation(queues, queues):
        parent = _parent(queues, key)
        if parent is not None:
            out.setdefault(parent, []).append(key)
    return out


def _post_order(queues: Mapping[str, QueueNode], children: Mapping[str, list[str]]) -> list[str]:
    """Every node after all its descendants (nodes on a cycle of parents are left out): a
    pre-order walk, reversed."""
    order: list[str] = []
    stack = [key for key in queues if _parent(queues, key) is None]
    while stack:
        key = stack.pop()
        order.append(key)
        stack.extend(children.get(key, ()))
    order.reverse()
    return order


def _capped_demand(
    queues: Mapping[str, QueueNode],
    children: Mapping[str, list[str]],
    order: Sequence[str],
    demand: Mapping[str, Resources],
) -> dict[str, _Vector]:
    """Each node's demand: its own (jobs are in leaves) plus its children's, capped by its
    quota."""
    out: dict[str, _Vector] = {key: _ZERO for key in queues}
    for key in order:
        own = demand.get(key)
        g, c, m, v = own.as_tuple() if own is not None else _ZERO
        for child in children.get(key, ()):
            cg, cc, cm, cv = out[child]
            g, c, m, v = g + cg, c + cc, m + cm, v + cv
        qg, qc, qm, qv = queues[key].quota.as_tuple()
        out[key] = (min(g, qg), min(c, qc), min(m, qm), min(v, qv))
    return out


def _effective_guaranteed(
    queues: Mapping[str, QueueNode], children: Mapping[str, list[str]], order: Sequence[str]
) -> dict[str, _Vector]:
    """max(own guarantee, sum of the children's effective guarantees), per resource."""
    out: dict[str, _Vector] = {key: queues[key].guaranteed.as_tuple() for key in queues}
    for key in order:
        kids = children.get(key, [])
        if not kids:
            continue
        own = queues[key].guaranteed.as_tuple()
        sums = [sum(out[c][r] for c in kids) for r in range(4)]
        out[key] = (
            max(own[0], sums[0]),
            max(own[1], sums[1]),
            max(own[2], sums[2]),
            max(own[3], sums[3]),
        )
    return out


def _weights(
    queues: Mapping[str, QueueNode], kids: Sequence[str], usage_over_time: bool
) -> list[list[float]]:
    """Per resource, the weight each child divides by (with the usage factor where it
    counts)."""
    base = [queues[c].weight for c in kids]
    if not usage_over_time or all(queues[c].usage_half_life is None for c in kids):
        return [base] * 4
    total_weight = sum(base)
    out = []
    for r in range(4):
        usage = [queues[c].decayed_usage.as_tuple()[r] for c in kids]
        total_usage = sum(usage)
        row = []
        for i, child in enumerate(kids):
            if queues[child].usage_half_life is None or total_usage <= 0 or base[i] <= 0:
                row.append(base[i])
                continue
            used = usage[i] / total_usage
            share = base[i] / total_weight
            row.append(base[i] * 2.0 ** (-used / share))
        out.append(row)
    return out


def _proportion(
    queues: Mapping[str, QueueNode],
    children: Mapping[str, list[str]],
    order: Sequence[str],
    capped: Mapping[str, _Vector],
    capacity: Resources,
) -> dict[str, Resources]:
    """Volcano's proportion: the leaves share the capacity by weight alone; every inner node
    reports the sum of its leaves."""
    leaves = [key for key in order if not children.get(key)]
    leaves = _by_creation(queues, leaves)
    no_priority = [0] * len(leaves)
    split = [
        divide(
            capacity.as_tuple()[r],
            [capped[k][r] for k in leaves],
            [0] * len(leaves),
            [queues[k].weight for k in leaves],
            no_priority,
            UNITS[r],
        )
        for r in range(4)
    ]
    shares: dict[str, _Vector] = {key: _ZERO for key in queues}
    for i, leaf in enumerate(leaves):
        shares[leaf] = (split[0][i], split[1][i], split[2][i], split[3][i])
    for key in order:
        kids = children.get(key, [])
        if kids:
            shares[key] = (
                sum(shares[c][0] for c in kids),
                sum(shares[c][1] for c in kids),
                sum(shares[c][2] for c in kids),
                sum(shares[c][3] for c in kids),
            )
    return {key: Resources(*shares[key]) for key in queues}
