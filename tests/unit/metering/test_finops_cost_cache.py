"""The kept cost (the budgets' cache) answers what pricing the whole ledger answers: as entries
arrive, while tasks run, after a price changes, and in a new period."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from aipaas.api.finops import PriceList
from aipaas.api.registry import parse_object
from aipaas.clock import VirtualClock
from aipaas.metering.cost import CostRow
from aipaas.metering.cost_cache import CostCache
from aipaas.metering.cost_ledger import cost
from aipaas.store import Store
from aipaas.store.ledger import ATTEMPT, CORRECTION, LedgerEntry, insert_entries

MARCH = datetime(2026, 3, 1, tzinfo=UTC)
BY = ("queue", "day")


def prices(price: float, version_from: str = "2026-01-01") -> PriceList:
    obj = parse_object(
        {
            "apiVersion": "aipaas/v1",
            "kind": "PriceList",
            "metadata": {"name": "standard"},
            "spec": {"validFrom": version_from, "gpu": [{"model": "*", "pricePerHour": price}]},
        }
    )
    assert isinstance(obj, PriceList)
    return obj


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{tmp_path / 'a.db'}", clock=VirtualClock(MARCH))
    opened.create(prices(2.0))
    yield opened
    opened.close()


def entry(index: int, start: datetime, hours: float, *, queue: str = "q") -> LedgerEntry:
    return LedgerEntry(
        kind=ATTEMPT,
        tenant="acme",
        queue=queue,
        user="u",
        job_name=f"j{index}",
        job_uid=f"uid{index}",
        task="w-0",
        attempt=0,
        gpu_model="H100",
        gpu_milli=1000,
        cpu_milli=0,
        memory_mib=0,
        started_at=start,
        ended_at=start + timedelta(hours=hours),
        gpu_hours=hours,
        cpu_hours=0,
        memory_gib_hours=0,
        recorded_by="controller",
        recorded_at=start + timedelta(hours=hours),
        attempt_key=f"uid{index}/w-0/0",
    )


def add(store: Store, *entries: LedgerEntry) -> None:
    with store.transaction() as tx:
        insert_entries(tx, list(entries))


def costs(rows: list[CostRow]) -> dict[tuple[str, ...], float]:
    return {(*r.key.values(), r.currency): round(r.cost, 6) for r in rows}


def agree(store: Store, cache: CostCache, since: datetime, now: datetime) -> None:
    kept = costs(cache.cost(store, "acme", since, now, BY))
    assert kept == costs(cost(store, "acme", since, now, BY))
    assert kept  # something to compare


def test_the_kept_cost_follows_the_ledger(store: Store) -> None:
    cache = CostCache()
    now = MARCH + timedelta(days=5)
    add(store, entry(1, MARCH + timedelta(hours=1), 3), entry(2, MARCH - timedelta(hours=2), 4))
    agree(store, cache, MARCH, now)
    add(store, entry(3, MARCH + timedelta(days=1, hours=23), 2, queue="other"))
    agree(store, cache, MARCH, now)
    # A correction recorded in the window.
    add(store, replace(entry(1, MARCH, 1), kind=CORRECTION, attempt_key=None, corrects=1))
    agree(store, cache, MARCH, now)


def test_a_price_change_and_a_new_period_price_everything_again(store: Store) -> None:
    cache = CostCache()
    now = MARCH + timedelta(days=5)
    add(store, entry(1, MARCH + timedelta(hours=1), 3))
    before = costs(cache.cost(store, "acme", MARCH, now, BY))
    stored = store.get("PriceList", "", "standard")
    store.update(prices(5.0).model_copy(update={"metadata": stored.metadata}))
    after = costs(cache.cost(store, "acme", MARCH, now, BY))
    assert after == {key: value * 2.5 for key, value in before.items()}
    agree(store, cache, MARCH, now)
    april = datetime(2026, 4, 1, tzinfo=UTC)
    add(store, entry(4, april + timedelta(hours=1), 1))
    agree(store, cache, april, april + timedelta(days=1))
