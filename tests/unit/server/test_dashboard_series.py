"""The dashboard's series over time: allocation averaged per bucket, hours and cost summed up to
each bucket's end, checked against figures worked out by hand."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from aipaas.api.finops import PriceList
from aipaas.api.node import Node
from aipaas.metering.prices import PriceBook
from aipaas.server.dashboard_cost import bucketed_cost
from aipaas.server.dashboard_timeline import Interval, bucketed, capacity, cumulative
from aipaas.store.ledger import ATTEMPT, CORRECTION, LedgerEntry

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_an_interval_counts_in_each_bucket_by_the_time_it_overlaps() -> None:
    # 4 GPUs from minute 1.5 to minute 3, in buckets of one minute from T0.
    series = bucketed([Interval("acme", "q", at(1.5), at(3), 4, 8)], T0, 60, 4)
    assert len(series) == 1
    assert series[0].gpu == [0, 2, 4, 0]  # half of minute 1, all of minute 2
    assert series[0].cpu == [0, 4, 8, 0]
    # 4 GPUs for 1.5 minutes = 0.1 GPU-hours, reached at the end of minute 2.
    assert series[0].gpu_hours == pytest.approx([0, 2 / 60, 0.1, 0.1], abs=1e-6)


def test_intervals_outside_the_window_are_clipped_and_queues_kept_apart() -> None:
    intervals = [
        Interval("acme", "a", at(-5), at(1), 1, 0),  # began before the window
        Interval("acme", "b", at(1), at(10), 2, 0),  # runs past its end
        Interval("globex", "a", at(0), at(2), 1, 0),
    ]
    series = bucketed(intervals, T0, 60, 2)
    by_key = {(s.tenant, s.queue): s.gpu for s in series}
    assert by_key == {("acme", "a"): [1, 0], ("acme", "b"): [0, 2], ("globex", "a"): [1, 1]}


def test_cumulative_hours_add_up_per_bucket() -> None:
    assert cumulative([2, 0, 1], 1800) == [1.0, 1.0, 1.5]


def test_capacity_counts_ready_nodes_only() -> None:
    def node(name: str, gpus: int, ready: bool) -> Node:
        return Node.model_validate(
            {
                "metadata": {"name": name},
                "spec": {"backend": "sim", "cpu": "500m", "memory": "1Gi", "gpus": {"count": gpus}},
                "status": {"ready": ready},
            }
        )

    assert capacity([node("a", 8, True), node("b", 4, False), node("c", 2, True)]) == (10, 1.0)


def attempt(queue: str, start: datetime, end: datetime, cpu_milli: int) -> LedgerEntry:
    return LedgerEntry(
        kind=ATTEMPT,
        tenant="acme",
        queue=queue,
        user="alice",
        job_name="j",
        job_uid=f"uid-{queue}-{start.isoformat()}",
        task="main-0",
        attempt=0,
        gpu_model="",
        gpu_milli=0,
        cpu_milli=cpu_milli,
        memory_mib=0,
        started_at=start,
        ended_at=end,
        gpu_hours=0,
        cpu_hours=0,
        memory_gib_hours=0,
        recorded_by="controller",
        recorded_at=end,
    )


def prices(name: str, start: datetime, per_core_hour: float, until: datetime | None) -> PriceList:
    spec = {"currency": "EUR", "validFrom": start.isoformat(), "cpuCoreHour": per_core_hour}
    if until is not None:
        spec["validUntil"] = until.isoformat()
    return PriceList.model_validate({"metadata": {"name": name}, "spec": spec})


def test_cost_is_cumulative_and_follows_a_price_change_inside_a_bucket() -> None:
    # 2 cores from minute 0 to 60; 6 EUR a core-hour until minute 30, 12 after.
    book = PriceBook([prices("old", at(-60), 6, at(30)), prices("new", at(30), 12, None)])
    edges = [at(0), at(20), at(40), at(60)]
    answer = bucketed_cost([attempt("q", at(0), at(60), 2000)], book, edges)
    # Per bucket: 2 x 6 x 1/3 = 4; 2 x (6 x 1/6 + 12 x 1/6) = 6; 2 x 12 x 1/3 = 8.
    (series,) = answer["series"]
    assert (series["queue"], series["currency"]) == ("q", "EUR")
    assert series["cost"] == pytest.approx([4, 10, 18])
    assert answer["total"] == {"EUR": pytest.approx(18)}
    assert answer["times"] == [e.isoformat() for e in edges[1:]]


def test_cost_leaves_out_unpriced_use_and_counts_corrections_when_recorded() -> None:
    book = PriceBook([prices("p", at(30), 60, None)])
    correction = replace(
        attempt("q", at(0), at(0), 0),
        kind=CORRECTION,
        started_at=None,
        ended_at=None,
        cpu_hours=0.5,
        recorded_at=at(45),
    )
    entries = [attempt("free", at(0), at(20), 1000), correction]
    answer = bucketed_cost(entries, book, [at(0), at(30), at(60)])
    # "free" ran before any price: no series. The correction: 0.5 core-hours at 60 = 30.
    assert [(s["queue"], s["cost"]) for s in answer["series"]] == [("q", [0, 30])]


def test_cost_buckets_clip_entries_to_the_window() -> None:
    book = PriceBook([prices("p", at(-120), 60, None)])  # 1 a core-minute
    entries = [
        attempt("long", at(-10), at(70), 1000),  # spans the whole window and beyond
        attempt("before", at(-30), at(0), 1000),  # ends as the window starts: none of it
        attempt("edge", at(20), at(40), 2000),  # exactly the middle bucket
    ]
    answer = bucketed_cost(entries, book, [at(0), at(20), at(40), at(60)])
    costs = {s["queue"]: s["cost"] for s in answer["series"]}
    assert costs == {
        "long": pytest.approx([20, 40, 60]),
        "edge": pytest.approx([0, 40, 40]),
    }
