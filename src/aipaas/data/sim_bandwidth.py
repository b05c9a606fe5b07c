"""Max-min fair sharing of bandwidth among flows, each crossing some capacity-limited links.

Progressive filling: every unfrozen flow grows at the same pace until it reaches its demand or
one of its links is full; flows on a full link freeze there. Pure arithmetic.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

INFINITE = float("inf")


@dataclass(frozen=True, slots=True)
class Flow:
    #: Bytes per second it wants at most (INFINITE: as much as it can get).
    demand: float
    #: The links it crosses.
    links: tuple[Hashable, ...]


def max_min_rates(flows: Sequence[Flow], capacity: Mapping[Hashable, float]) -> list[float]:
    """The rate of each flow: max-min fair, within each link's capacity and each demand."""
    rates = [0.0] * len(flows)
    left = dict(capacity)
    active = {i for i, flow in enumerate(flows) if flow.demand > 0}
    while active:
        users: dict[Hashable, int] = {}
        for i in active:
            for link in flows[i].links:
                users[link] = users.get(link, 0) + 1
        step = min(flows[i].demand - rates[i] for i in active)
        for link, count in users.items():
            step = min(step, left[link] / count)
        if step == INFINITE:
            raise ValueError("a flow of infinite demand crosses no finite link")
        for i in active:
            rates[i] += step
            for link in flows[i].links:
                left[link] -= step
        full = {link for link in users if left[link] <= 1e-9 * max(capacity[link], 1.0)}
        active = {
            i
            for i in active
            if _unmet(flows[i], rates[i]) and not any(link in full for link in flows[i].links)
        }
    return rates


def _unmet(flow: Flow, rate: float) -> bool:
    if flow.demand == INFINITE:
        return True
    return flow.demand - rate > 1e-9 * max(flow.demand, 1.0)
