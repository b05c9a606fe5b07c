"""Cost of a scripted day against totals computed by hand: prices change at noon, a tenant has
its own prices, a spot tier pays half, an attempt crosses midnight, a correction is priced when
it was recorded."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from aipaas.api.finops import PriceList
from aipaas.api.registry import parse_object
from aipaas.metering.attribution import attribution
from aipaas.metering.cost import price_entries, totals
from aipaas.metering.prices import PriceBook
from aipaas.store.ledger import ATTEMPT, CORRECTION, LedgerEntry

DAY = datetime(2026, 3, 10, tzinfo=UTC)


def at(hour: int, day: int = 10) -> datetime:
    return datetime(2026, 3, day, hour, tzinfo=UTC)


def prices(name: str, spec: dict[str, Any]) -> PriceList:
    obj = parse_object(
        {"apiVersion": "aipaas/v1", "kind": "PriceList", "metadata": {"name": name}, "spec": spec}
    )
    assert isinstance(obj, PriceList)
    return obj


BOOK = PriceBook(
    [
        prices(
            "morning",
            {
                "validFrom": "2026-03-01",
                "validUntil": "2026-03-10T12:00:00Z",
                "gpu": [{"model": "H100", "pricePerHour": 2.0}],
                "cpuCoreHour": 0.05,
                "memoryGiBHour": 0.01,
            },
        ),
        prices(
            "afternoon",
            {
                "validFrom": "2026-03-10T12:00:00Z",
                "gpu": [
                    {"model": "H100", "pricePerHour": 3.0},
                    {"model": "A100", "pricePerHour": 1.0},
                    {"model": "*", "pricePerHour": 0.5},
                ],
                "cpuCoreHour": 0.1,
                "tierFactors": {"spot": 0.5},
            },
        ),
        prices(
            "beta-deal",
            {
                "tenants": ["beta"],
                "validFrom": "2026-03-10",
                "validUntil": "2026-03-11",
                "gpu": [{"model": "H100", "pricePerHour": 1.0}],
            },
        ),
    ]
)


def attempt(
    tenant: str,
    job: str,
    start: datetime,
    end: datetime,
    *,
    model: str = "H100",
    gpu_milli: int = 1000,
    cpu_milli: int = 0,
    memory_mib: int = 0,
    tier: str = "",
) -> LedgerEntry:
    hours = (end - start).total_seconds() / 3600
    return LedgerEntry(
        kind=ATTEMPT,
        tenant=tenant,
        queue="q",
        user="u",
        job_name=job,
        job_uid=f"uid-{job}",
        task="w-0",
        attempt=0,
        gpu_model=model,
        gpu_milli=gpu_milli,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        started_at=start,
        ended_at=end,
        gpu_hours=hours * gpu_milli / 1000,
        cpu_hours=hours * cpu_milli / 1000,
        memory_gib_hours=hours * memory_mib / 1024,
        recorded_by="controller",
        recorded_at=end,
        reason=attribution("", tier),
        attempt_key=f"uid-{job}/w-0/0",
    )


ENTRIES = [
    # 2 H100, 4 cores, 16 GiB from 08:00 to 14:00: 4 h of morning, 2 h of afternoon prices.
    attempt("alpha", "j1", at(8), at(14), gpu_milli=2000, cpu_milli=4000, memory_mib=16 * 1024),
    # half an A100 on the spot tier, 13:00-17:00 under afternoon prices, half off.
    attempt("alpha", "j2", at(13), at(17), model="A100", gpu_milli=500, tier="spot"),
    # one H100 from 22:00 to 02:00 the next day.
    attempt("alpha", "j3", at(22), at(2, day=11)),
    # beta's own prices win over the general ones while they hold.
    attempt("beta", "j4", at(10), at(14)),
    LedgerEntry(
        kind=CORRECTION,
        tenant="alpha",
        queue="q",
        user="u",
        job_name="j1",
        job_uid="uid-j1",
        task="w-0",
        attempt=0,
        gpu_model="H100",
        gpu_milli=0,
        cpu_milli=0,
        memory_mib=0,
        started_at=None,
        ended_at=None,
        gpu_hours=-1.0,
        cpu_hours=0.0,
        memory_gib_hours=0.0,
        recorded_by="admin",
        recorded_at=at(15),
        reason="double counted",
        corrects=1,
    ),
]

# By hand:
J1 = (2 * 2.0 * 4 + 4 * 0.05 * 4 + 16 * 0.01 * 4) + (2 * 3.0 * 2 + 4 * 0.1 * 2)  # 17.44 + 12.8
J2 = 0.5 * 1.0 * 4 * 0.5  # 1.0
J3_TENTH, J3_ELEVENTH = 2 * 3.0, 2 * 3.0
CORRECTION_COST = -1 * 3.0
J4 = 4 * 1.0


def by(rows: list[Any], *names: str) -> dict[tuple[str, ...], float]:
    return {tuple(row.key[n] for n in names): round(row.cost, 6) for row in rows}


def test_a_scripted_day_costs_what_was_computed_by_hand() -> None:
    rows = price_entries(ENTRIES, BOOK, at(0), at(0, day=12), ("tenant", "day"))
    assert by(rows, "tenant", "day") == {
        ("alpha", "2026-03-10"): pytest.approx(J1 + J2 + J3_TENTH + CORRECTION_COST),
        ("alpha", "2026-03-11"): pytest.approx(J3_ELEVENTH),
        ("beta", "2026-03-10"): pytest.approx(J4),
    }
    assert totals(rows) == {"USD": pytest.approx(J1 + J2 + J3_TENTH + J3_ELEVENTH - 3 + J4)}


def test_cost_by_job_and_the_hours_behind_it() -> None:
    rows = price_entries(ENTRIES, BOOK, at(0), at(0, day=12), ("job",))
    assert by(rows, "job") == {
        ("j1",): pytest.approx(J1 + CORRECTION_COST),
        ("j2",): pytest.approx(J2),
        ("j3",): pytest.approx(J3_TENTH + J3_ELEVENTH),
        ("j4",): pytest.approx(J4),
    }
    j1 = next(r for r in rows if r.key["job"] == "j1")
    assert j1.gpu_hours == pytest.approx(12 - 1)  # 2 GPUs x 6 h, less the correction's hour
    assert j1.cpu_hours == pytest.approx(24)
    assert j1.memory_gib_hours == pytest.approx(96)


def test_a_window_prices_only_what_ran_inside_it() -> None:
    rows = price_entries(ENTRIES[:1], BOOK, at(11), at(13), ("job",))
    one_morning_hour = 2 * 2.0 + 4 * 0.05 + 16 * 0.01
    one_afternoon_hour = 2 * 3.0 + 4 * 0.1
    assert by(rows, "job") == {("j1",): pytest.approx(one_morning_hour + one_afternoon_hour)}


def test_the_tier_and_model_dimensions() -> None:
    rows = price_entries(ENTRIES, BOOK, at(0), at(0, day=12), ("tenant", "model", "tier"))
    assert by(rows, "tenant", "model", "tier")[("alpha", "A100", "spot")] == pytest.approx(J2)


def test_use_no_price_covers_costs_nothing_and_says_so() -> None:
    early = attempt(
        "alpha", "old", datetime(2026, 2, 1, tzinfo=UTC), datetime(2026, 2, 2, tzinfo=UTC)
    )
    rows = price_entries([early], BOOK, datetime(2026, 1, 1, tzinfo=UTC), at(0), ("job",))
    assert [(r.currency, r.cost, r.gpu_hours) for r in rows] == [("", 0.0, 24.0)]


def test_the_price_in_force_for_a_tenant() -> None:
    assert BOOK.at("beta", at(11)).name == "beta-deal"  # type: ignore[union-attr]
    assert BOOK.at("alpha", at(11)).name == "morning"  # type: ignore[union-attr]
    assert BOOK.at("beta", at(1, day=11)).name == "afternoon"  # type: ignore[union-attr]
    assert [p.name for p in BOOK.visible_to("alpha")] == ["afternoon", "morning"]
