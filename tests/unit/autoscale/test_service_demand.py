"""Requests waiting at the entry point are demand for every metric: a service scaled to zero
wakes on its first waiting request (with ``rps`` too, whose answered-only rate is 0 while
nothing serves), past the stabilisation windows; it goes back to zero once nothing waits.
And the crash back-off: 10 s doubling to 5 minutes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from aipaas.api.service import ServiceSpec
from aipaas.autoscale.replicas import Load, ScalerMemory, decide
from aipaas.controller.services_reconcile import crash_back_off

NOON = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def spec(metric: str = "concurrency", **scaling: Any) -> ServiceSpec:
    return ServiceSpec.model_validate(
        {
            "template": {"command": ["serve"]},
            "minReplicas": 0,
            "maxReplicas": 5,
            "autoscaling": {"metric": metric, "target": 4, **scaling},
        }
    )


def step(
    service: ServiceSpec,
    memory: ScalerMemory,
    now: float,
    *,
    current: int,
    ready: int,
    concurrency: float = 0.0,
    rate: float = 0.0,
    waiting: float = 0.0,
) -> int:
    load = Load(now, concurrency, rate, waiting=waiting, in_flight=waiting)
    return decide(
        service, memory, load=load, now=now, wall=NOON, current=current, ready=ready
    ).desired


@pytest.mark.parametrize("metric", ["rps", "concurrency"])
def test_a_waiting_request_wakes_a_service_at_zero_whatever_its_metric(metric: str) -> None:
    service = spec(metric)
    memory = ScalerMemory()
    assert step(service, memory, 0.0, current=0, ready=0) == 0
    # One request waits; nothing was answered (rate 0), its concurrency is averaged in.
    woken = step(service, memory, 1.0, current=0, ready=0, concurrency=0.2, waiting=1)
    assert woken == 1


def test_the_wake_goes_past_a_scale_up_stabilisation_window() -> None:
    service = spec("rps", scaleUp={"stabilizationWindowSeconds": 120})
    memory = ScalerMemory()
    for second in range(5):
        assert step(service, memory, float(second), current=0, ready=0) == 0
    assert step(service, memory, 5.0, current=0, ready=0, waiting=1) == 1


def test_waiting_requests_count_as_rate_demand_beyond_one_replica() -> None:
    service = spec("rps", stableWindowSeconds=10, panicWindowSeconds=2)
    memory = ScalerMemory()
    desired = 0
    for second in range(4):
        desired = step(service, memory, float(second), current=desired, ready=0, waiting=12)
    assert desired == 3  # 12 waiting requests at 4 per replica


def test_nothing_waiting_and_nothing_answered_lets_it_return_to_zero() -> None:
    service = spec("rps", stableWindowSeconds=10, panicWindowSeconds=2)
    memory = ScalerMemory()
    desired = step(service, memory, 0.0, current=0, ready=0, waiting=1)
    assert desired == 1
    for second in range(1, 80):
        desired = step(service, memory, float(second), current=desired, ready=desired)
    assert desired == 0


def test_concurrency_is_the_default_metric() -> None:
    service = ServiceSpec.model_validate(
        {"template": {"command": ["x"]}, "minReplicas": 0, "autoscaling": {"target": 1}}
    )
    assert service.autoscaling is not None and service.autoscaling.metric == "concurrency"


def test_the_crash_back_off_doubles_from_10_seconds_to_5_minutes() -> None:
    assert [crash_back_off(n) for n in range(1, 8)] == [10, 20, 40, 80, 160, 300, 300]


def test_six_starts_at_most_in_three_minutes_of_a_replica_that_exits_at_once() -> None:
    starts, now, failures = [0.0], 0.0, 0
    while now < 180:
        failures += 1
        now += crash_back_off(failures)
        if now <= 180:
            starts.append(now)
    assert len(starts) <= 6, starts
