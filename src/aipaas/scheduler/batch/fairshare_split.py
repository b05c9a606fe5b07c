"""Dividing one resource among siblings (batch/fairshare.py): guarantees first, then by weight
in whole units (or the finest step the siblings' numbers use), the largest remainder method
for each round, priority groups in turn."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

_EPSILON: Final = 1e-9


def divide(
    available: int,
    need: Sequence[int],
    guaranteed: Sequence[int],
    weights: Sequence[float],
    priorities: Sequence[int],
    unit: int,
) -> list[int]:
    """Shares of ``available`` among children in creation order (steps 1 and 2 of
    fairshare.py's docstring); ``need`` is each child's demand capped by its quota. Divided
    in units of ``unit`` or, where the siblings' needs and guarantees come in finer steps
    (half GPUs, 0.5-CPU tasks), of the finest step they use (their greatest common divisor):
    whole-unit demands keep whole units, and two queues of 0.5-GPU jobs sharing one GPU get
    0.5 each rather than 1 and 0."""
    unit = math.gcd(unit, *need, *guaranteed) or unit
    left = max(available, 0)
    if sum(need) <= left:
        return list(need)  # everyone reaches its demand: nothing to divide
    share = [0] * len(need)
    for i, wanted in enumerate(need):
        take = min(guaranteed[i], wanted, left)
        share[i] = take
        left -= take
    if left <= 0:
        return share
    if sum(need) - sum(share) <= left:
        return list(need)  # everyone reaches its demand: nothing to divide
    for priority in sorted(set(priorities), reverse=True):
        group = [i for i, p in enumerate(priorities) if p == priority and share[i] < need[i]]
        left = _water_fill(group, share, need, weights, left, unit)
        if left <= 0:
            break
    return share


def _water_fill(
    active: list[int],
    share: list[int],
    need: Sequence[int],
    weights: Sequence[float],
    left: int,
    unit: int,
) -> int:
    """Give ``left`` to the ``active`` children by weight, in whole units, until each reaches
    its need or nothing is left; returns what is left. Children of weight 0 (Kueue's and
    KAI's "no share above the guarantee") get only what the weighted ones leave, divided
    among them equally."""
    for tier in ([i for i in active if weights[i] > 0], [i for i in active if weights[i] <= 0]):
        pull = {i: weights[i] if weights[i] > 0 else 1.0 for i in tier}
        while tier and left > 0:
            units = left // unit
            if units == 0:
                for i in tier:  # below one unit: in creation order
                    give = min(need[i] - share[i], left)
                    share[i] += give
                    left -= give
                break
            for i, count in zip(
                tier, largest_remainder(units, [pull[i] for i in tier]), strict=True
            ):
                give = min(count * unit, need[i] - share[i])
                share[i] += give
                left -= give
            tier = [i for i in tier if share[i] < need[i]]
    return left


def largest_remainder(units: int, weights: Sequence[float]) -> list[int]:
    """``units`` split in proportion to ``weights`` (all > 0): each gets the whole part of its
    quota, and the units left go to the largest remainders, ties to the one listed first."""
    total = sum(weights)
    exact = [units * w / total for w in weights]
    counts = [int(x + _EPSILON) for x in exact]
    rest = units - sum(counts)
    if rest > 0:
        order = sorted(range(len(exact)), key=lambda i: (-round(exact[i] - counts[i], 9), i))
        for i in order[:rest]:
            counts[i] += 1
    return counts
