"""A budget's period, spend, forecast and the thresholds its spend has crossed.

Spend is the cost (metering/cost.py) of the budget's tenant, or of its queue, from the start of
the current period to now, in the budget's currency (use no price list prices counts nothing).
The forecast assumes the burn rate of the period so far goes on to its end:
``spent * period length / time elapsed``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from aipaas.api.finops import Budget
from aipaas.metering.cost import CostRow
from aipaas.store.types import as_utc


@dataclass(frozen=True)
class Period:
    start: datetime
    end: datetime
    key: str  # "2026-03-10", "2026-W11", "2026-03"


def period_of(kind: str, now: datetime) -> Period:
    now = as_utc(now)
    day = datetime(now.year, now.month, now.day, tzinfo=UTC)
    if kind == "daily":
        return Period(day, day + timedelta(days=1), day.date().isoformat())
    if kind == "weekly":
        monday = day - timedelta(days=day.weekday())
        year, week, _ = monday.isocalendar()
        return Period(monday, monday + timedelta(days=7), f"{year}-W{week:02d}")
    start = datetime(now.year, now.month, 1, tzinfo=UTC)
    end = (start + timedelta(days=32)).replace(day=1)
    return Period(start, end, start.strftime("%Y-%m"))


@dataclass(frozen=True)
class Standing:
    """Where a budget stands now."""

    period: Period
    spent: float
    forecast: float
    percent: float
    #: thresholds reached, in percent, lowest first
    crossed: tuple[float, ...]
    #: actions in force (those of the crossed thresholds, notify left out)
    actions: tuple[str, ...]


def spent(budget: Budget, rows: Sequence[CostRow]) -> float:
    """``rows``: the tenant's cost by queue in the period."""
    queue = budget.spec.queue
    return sum(
        row.cost
        for row in rows
        if row.currency == budget.spec.currency and (queue is None or row.key["queue"] == queue)
    )


def standing(budget: Budget, rows: Sequence[CostRow], now: datetime) -> Standing:
    period = period_of(budget.spec.period, now)
    amount = spent(budget, rows)
    elapsed = max((as_utc(now) - period.start).total_seconds(), 1.0)
    length = (period.end - period.start).total_seconds()
    percent = 100 * amount / budget.spec.amount
    reached = [t for t in budget.spec.thresholds if t.percent <= percent + 1e-9]
    crossed = tuple(t.percent for t in sorted(reached, key=lambda t: t.percent))
    actions = tuple(sorted({t.action for t in reached if t.action != "notify"}))
    return Standing(
        period=period,
        spent=round(amount, 6),
        forecast=round(amount * length / elapsed, 6),
        percent=round(percent, 4),
        crossed=crossed,
        actions=actions,
    )


def delivery_name(budget: Budget, period: Period, percent: float) -> str:
    """The delivery log's name for one crossing: the same crossing always gets the same name
    (so it is entered once); a DNS label whatever the budget's name."""
    what = f"{budget.tenant}/{budget.name}/{budget.metadata.uid}/{period.key}/{percent:g}"
    return f"budget-{hashlib.sha256(what.encode()).hexdigest()[:24]}"
