"""Budget periods (UTC days, ISO weeks, months) and the forecast from the burn rate."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from aipaas.api.finops import Budget
from aipaas.metering.budgets import period_of, standing
from aipaas.metering.cost import CostRow


@pytest.mark.parametrize(
    ("kind", "start", "end", "key"),
    [
        ("daily", datetime(2026, 12, 31), datetime(2027, 1, 1), "2026-12-31"),
        ("weekly", datetime(2026, 12, 28), datetime(2027, 1, 4), "2026-W53"),
        ("monthly", datetime(2026, 12, 1), datetime(2027, 1, 1), "2026-12"),
    ],
)
def test_periods(kind: str, start: datetime, end: datetime, key: str) -> None:
    period = period_of(kind, datetime(2026, 12, 31, 23, 59, tzinfo=UTC))
    assert (period.start, period.end, period.key) == (
        start.replace(tzinfo=UTC),
        end.replace(tzinfo=UTC),
        key,
    )


def budget(**spec: object) -> Budget:
    return Budget.model_validate(
        {"metadata": {"name": "b", "tenant": "t"}, "spec": {"amount": 100, **spec}}
    )


def rows(*pairs: tuple[str, float, str]) -> list[CostRow]:
    return [CostRow({"queue": q}, currency, cost=amount) for q, amount, currency in pairs]


def test_standing_counts_its_queue_and_currency_only() -> None:
    spent = rows(("a", 30, "USD"), ("b", 500, "USD"), ("a", 99, "EUR"))
    now = datetime(2026, 3, 11, tzinfo=UTC)  # 10 days of 31
    queue = standing(budget(queue="a", thresholds=[25, 50]), spent, now)
    assert (queue.spent, queue.crossed) == (30, (25,))
    assert queue.forecast == pytest.approx(30 * 31 / 10)
    tenant = standing(
        budget(thresholds=[50, {"percent": 500, "action": "stopAdmission"}]), spent, now
    )
    assert (tenant.spent, tenant.crossed, tenant.actions) == (530, (50, 500), ("stopAdmission",))
