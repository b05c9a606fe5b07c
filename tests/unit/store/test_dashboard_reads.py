"""The dashboard's reads on both databases: the timeline and the cost series from the usage
ledger, and the newest events first, each of one tenant or all."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from aipaas.api.finops import PriceList
from aipaas.api.queue import Queue
from aipaas.api.tenancy import Tenant
from aipaas.server.dashboard_cost import cost_timeline
from aipaas.server.dashboard_events import newest_events
from aipaas.server.dashboard_timeline import timeline
from aipaas.store import Store
from aipaas.store.ledger import ATTEMPT, LedgerEntry, insert_entries


def attempt(tenant: str, start: datetime, end: datetime, gpus: int) -> LedgerEntry:
    return LedgerEntry(
        kind=ATTEMPT,
        tenant=tenant,
        queue="q",
        user="u",
        job_name="j",
        job_uid=f"uid-{tenant}-{start.timestamp()}",
        task="w-0",
        attempt=0,
        gpu_model="H100",
        gpu_milli=gpus * 1000,
        cpu_milli=0,
        memory_mib=0,
        started_at=start,
        ended_at=end,
        gpu_hours=0,
        cpu_hours=0,
        memory_gib_hours=0,
        recorded_by="controller",
        recorded_at=end,
        attempt_key=f"uid-{tenant}-{start.timestamp()}/w-0/0",
    )


@pytest.fixture
def filled(store: Store) -> Store:
    now = store.clock.now()
    spec = {
        "currency": "EUR",
        "validFrom": "2020-01-01",
        "gpu": [{"model": "*", "pricePerHour": 3}],
    }
    store.create(PriceList.model_validate({"metadata": {"name": "p"}, "spec": spec}))
    with store.transaction() as tx:
        insert_entries(
            tx,
            [
                # 4 GPUs for 20 minutes in the last hour; 2 GPUs ended two hours ago.
                attempt("a", now - timedelta(minutes=30), now - timedelta(minutes=10), 4),
                attempt("a", now - timedelta(hours=3), now - timedelta(hours=2), 2),
                attempt("b", now - timedelta(minutes=50), now - timedelta(minutes=20), 8),
            ],
        )
    return store


def test_the_timeline_sums_the_window_of_one_tenant(filled: Store) -> None:
    answer = timeline(filled, "a", 3600, 6)
    (series,) = answer["series"]
    assert (series["tenant"], series["queue"]) == ("a", "q")
    # 4 GPUs x 20 minutes: 4/3 GPU-hours, held through buckets 3 and 4 of 10 minutes each.
    assert series["gpuHours"][-1] == pytest.approx(4 / 3, rel=1e-3)
    assert [round(v) for v in series["gpu"]] == [0, 0, 0, 4, 4, 0]
    both = timeline(filled, None, 3600, 6)
    assert {s["tenant"] for s in both["series"]} == {"a", "b"}


def test_the_cost_series_prices_the_window(filled: Store) -> None:
    answer = cost_timeline(filled, "a", 3600, 6)
    (series,) = answer["series"]
    assert series["currency"] == "EUR"
    # 4/3 GPU-hours at 3 EUR: 4 EUR; the attempt of two hours ago is outside the window.
    assert series["cost"][-1] == pytest.approx(4, rel=1e-3)
    assert answer["total"]["EUR"] == pytest.approx(4, rel=1e-3)


def test_newest_events_come_first_and_stay_in_their_tenant(store: Store) -> None:
    for tenant in ("a", "b"):
        store.create(Tenant.model_validate({"metadata": {"name": tenant}}))
    queue = store.create(Queue.model_validate({"metadata": {"name": "q", "tenant": "a"}}))
    store.record_event(queue, "First", "one")
    store.record_event(queue, "Second", "two", warning=True)
    store.record_event(queue, "Third", "three")
    assert [e["reason"] for e in newest_events(store, "a", None, 2)] == ["Third", "Second"]
    assert [e["reason"] for e in newest_events(store, "a", "Warning", 10)] == ["Second"]
    assert newest_events(store, "b", None, 10) == []
