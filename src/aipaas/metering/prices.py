"""Which price holds at each instant, and what an attempt's resources cost per hour under it.

For a tenant at instant t the price list is: among the lists valid at t (validFrom <= t <
validUntil), the tenant's own (naming it in ``tenants``) before the general ones, and among
those the one that became valid last (ties: by name). An interval is split wherever a list
starts or stops being valid, so a price changed at noon prices the morning and the afternoon
apart. Pure: the lists are handed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise

from aipaas.api.finops import PriceList


@dataclass(frozen=True)
class Rates:
    """What one attempt uses at once: GPUs in thousandths, CPU in millicores, memory in MiB;
    the node pool and the priority class (tier) it ran in."""

    gpu_model: str
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    pool: str = ""
    tier: str = ""


@dataclass(frozen=True)
class Priced:
    """One piece of an interval under one price list (None: no price holds: it costs 0)."""

    start: datetime
    end: datetime
    prices: PriceList | None

    @property
    def hours(self) -> float:
        return max((self.end - self.start).total_seconds(), 0.0) / 3600


class PriceBook:
    """The price lists, asked for the price of a tenant over an interval."""

    def __init__(self, lists: Iterable[PriceList]) -> None:
        self.lists = sorted(lists, key=lambda p: p.name)
        self._edges = sorted(
            {p.spec.valid_from for p in self.lists}
            | {p.spec.valid_until for p in self.lists if p.spec.valid_until is not None}
        )

    def at(self, tenant: str, moment: datetime) -> PriceList | None:
        """The list that prices ``tenant``'s use at ``moment``."""
        valid = [p for p in self.lists if p.spec.valid_at(moment) and _applies(p, tenant)]
        if not valid:
            return None
        return max(valid, key=lambda p: (bool(p.spec.tenants), p.spec.valid_from, p.name))

    def split(self, tenant: str, start: datetime, end: datetime) -> Iterator[Priced]:
        """[start, end) in pieces, each under one price list."""
        cuts = [start, *(edge for edge in self._edges if start < edge < end), end]
        for left, right in pairwise(cuts):
            if right > left:
                yield Priced(left, right, self.at(tenant, left))

    def visible_to(self, tenant: str) -> list[PriceList]:
        """The lists that may price ``tenant``'s use (its price view)."""
        return [p for p in self.lists if _applies(p, tenant)]


def _applies(prices: PriceList, tenant: str) -> bool:
    return not prices.spec.tenants or tenant in prices.spec.tenants


def hourly(prices: PriceList | None, rates: Rates) -> float:
    """The cost of one hour of ``rates`` under ``prices``."""
    if prices is None:
        return 0.0
    spec = prices.spec
    base = spec.gpu_price(rates.gpu_model) * rates.gpu_milli / 1000 if rates.gpu_milli else 0.0
    base += spec.cpu_core_hour * rates.cpu_milli / 1000
    base += spec.memory_gib_hour * rates.memory_mib / 1024
    return base * spec.pool_factors.get(rates.pool, 1.0) * spec.tier_factors.get(rates.tier, 1.0)


def hours_cost(
    prices: PriceList | None, gpu_model: str, gpu_hours: float, cpu_hours: float, gib_hours: float
) -> float:
    """The cost of hours given as totals (a correction: no rates, no pool, no tier)."""
    if prices is None:
        return 0.0
    spec = prices.spec
    return (
        spec.gpu_price(gpu_model) * gpu_hours
        + spec.cpu_core_hour * cpu_hours
        + spec.memory_gib_hour * gib_hours
    )
