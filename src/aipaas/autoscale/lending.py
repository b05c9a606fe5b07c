"""Lent capacity (issue 14): a pool's (or a tenant's) idle guaranteed GPUs run spot work, which
is taken back when the lender's own work arrives, and metered for both sides. Pure.

How it runs, with no scheduler of its own: spot jobs are jobs of the pool's spot priority class
(preemptible, the lowest value). They borrow the lender's unused guarantee like any queue above
its fair share, and the batch scheduler's reclaim (scheduler/batch/actions/reclaim.py) takes it
back when the lender's queue wants its guarantee: victims lowest priority first, so spot work
goes before anything else, in the cycle the lender's job is seen. Each evicted task gets the
controller's stop grace, so the GPUs are back within one cycle plus the grace period
(``reclaim_seconds``); ``reclaim_problem`` says when a pool's ``reclaimWithin`` cannot be kept.

Metering: a ledger entry records the pool of its node and the priority class of its job
(metering/attribution.py); spot GPU-hours on a lending pool's nodes are charged to the borrower
at the pool's spot price and credited to the lender (``lending_lines``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from aipaas.api.duration import seconds
from aipaas.api.pool import NodePool
from aipaas.metering.attribution import parse

#: who is credited when a pool names no lender
PLATFORM: str = "(platform)"


class LedgerLine(Protocol):
    """What lending reads of a usage ledger entry (store/ledger.py's LedgerEntry has it)."""

    @property
    def reason(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def gpu_hours(self) -> float: ...


@dataclass(frozen=True)
class LendingTerms:
    pool: str
    lender: str
    tier: str
    price_per_gpu_hour: float
    grace_seconds: float
    reclaim_within_seconds: float


def terms_of(pool: NodePool) -> LendingTerms | None:
    lending = pool.spec.lending
    if not lending.enabled:
        return None
    return LendingTerms(
        pool=pool.name,
        lender=lending.lender or PLATFORM,
        tier=lending.spot_priority_class,
        price_per_gpu_hour=lending.spot_price_per_gpu_hour,
        grace_seconds=seconds(lending.grace_period),
        reclaim_within_seconds=seconds(lending.reclaim_within),
    )


def reclaim_seconds(terms: LendingTerms, cycle_seconds: float, stop_grace_seconds: float) -> float:
    """The longest a lender waits for its GPUs: the cycle that sees its job, then the spot
    tasks' grace (the shorter of the pool's and the controller's)."""
    return cycle_seconds + min(terms.grace_seconds, stop_grace_seconds)


def reclaim_problem(
    terms: LendingTerms, cycle_seconds: float, stop_grace_seconds: float
) -> str | None:
    bound = reclaim_seconds(terms, cycle_seconds, stop_grace_seconds)
    if bound <= terms.reclaim_within_seconds:
        return None
    return (
        f"pool {terms.pool}: lent GPUs come back within {bound:g}s (a cycle and the grace "
        f"period), more than reclaimWithin {terms.reclaim_within_seconds:g}s"
    )


@dataclass(frozen=True)
class LendingLine:
    """Spot use of one pool by one borrower: charged to the borrower, credited to the lender."""

    pool: str
    lender: str
    borrower: str
    gpu_hours: float
    price_per_gpu_hour: float

    @property
    def amount(self) -> float:
        return self.gpu_hours * self.price_per_gpu_hour


def lending_lines(
    entries: Iterable[LedgerLine], terms: Mapping[str, LendingTerms]
) -> list[LendingLine]:
    """Spot GPU-hours on lending pools, per (pool, borrower). A lender's own spot work on its
    own pool is not lent (no line)."""
    hours: dict[tuple[str, str], float] = defaultdict(float)
    for entry in entries:
        pool, tier = parse(entry.reason)
        lent = terms.get(pool)
        if lent is None or tier != lent.tier or entry.tenant == lent.lender:
            continue
        hours[(pool, entry.tenant)] += entry.gpu_hours
    return [
        LendingLine(pool, terms[pool].lender, borrower, used, terms[pool].price_per_gpu_hour)
        for (pool, borrower), used in sorted(hours.items())
        if used > 0
    ]


def balances(lines: Iterable[LendingLine]) -> dict[str, float]:
    """Per tenant: credited (lender, positive) minus charged (borrower, negative)."""
    result: dict[str, float] = defaultdict(float)
    for line in lines:
        result[line.lender] += line.amount
        result[line.borrower] -= line.amount
    return dict(result)
