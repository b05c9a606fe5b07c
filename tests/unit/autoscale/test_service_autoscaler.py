"""The replica autoscaler and the rollout planner: pure functions of load, time and replicas."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from aipaas.api.service import RollingUpdate, ServiceSpec
from aipaas.autoscale.replicas import Load, ScalerMemory, decide, scheduled_minimum
from aipaas.autoscale.service_rollout import ReplicaView, plan

MONDAY_NOON = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def spec(**fields: Any) -> ServiceSpec:
    scaling = {"target": 2, "stableWindowSeconds": 10, "panicWindowSeconds": 2}
    scaling.update(fields.pop("autoscaling", {}))
    body: dict[str, Any] = {
        "template": {"command": ["serve"]},
        "minReplicas": 1,
        "maxReplicas": 10,
        "autoscaling": scaling,
    }
    body.update(fields)
    return ServiceSpec.model_validate(body)


def run(
    service: ServiceSpec, loads: list[float], *, start: int = 1, step: float = 1.0
) -> list[int]:
    """Desired counts after each load sample (concurrency), with every replica ready."""
    memory = ScalerMemory()
    current, seen = start, []
    for index, value in enumerate(loads):
        now = index * step
        decision = decide(
            service,
            memory,
            load=Load(now, value, 0.0),
            now=now,
            wall=MONDAY_NOON,
            current=current,
            ready=current,
        )
        current = decision.desired
        seen.append(current)
    return seen


def test_desired_is_the_load_over_the_target_per_replica() -> None:
    # 8 in flight at 2 per replica: 4 replicas once the stable window has seen it.
    seen = run(spec(autoscaling={"panicThreshold": 100}), [8.0] * 12)
    assert seen[-1] == 4
    assert max(seen) == 4


def test_a_burst_panics_up_at_once_and_a_lull_scales_down_after_its_window() -> None:
    service = spec(autoscaling={"scaleDown": {"stabilizationWindowSeconds": 5}})
    seen = run(service, [2.0] * 3 + [16.0] * 2 + [0.0] * 30)
    assert seen[2] == 1
    # Panic: the 2 s window (samples 2, 16, 16: 11.3 in flight) wants 6, the stable one 4.
    assert seen[3] > 1 and seen[4] == 6
    assert seen[8] == 6  # the panic holds the count while the load drops
    assert seen[-1] == 1  # back to minReplicas, not at once


def test_scale_to_zero_and_back_on_the_first_request() -> None:
    service = spec(minReplicas=0, autoscaling={"scaleDown": {"stabilizationWindowSeconds": 3}})
    seen = run(service, [0.0] * 20 + [1.0], start=1)
    assert 0 in seen[:20]
    assert seen[-1] == 1


def test_scale_up_limit_per_period() -> None:
    service = spec(
        autoscaling={"panicThreshold": 100, "scaleUp": {"maxReplicas": 1, "periodSeconds": 3}}
    )
    seen = run(service, [20.0] * 30)
    steps = [b - a for a, b in itertools.pairwise(seen)]
    assert max(steps) == 1
    assert seen[-1] == 10  # maxReplicas in the end
    assert seen.index(3) - seen.index(2) >= 3  # one more per period of 3 s


def test_scheduled_minimums_raise_the_floor_in_their_window() -> None:
    service = spec(
        scheduledMinimums=[
            {"replicas": 3, "start": "08:00", "end": "18:00", "days": ["Mon", "Tue"]},
            {"replicas": 2, "start": "22:00", "end": "02:00", "days": ["Sun"]},
        ]
    )
    assert scheduled_minimum(service.scheduled_minimums, MONDAY_NOON) == 3
    saturday = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    assert scheduled_minimum(service.scheduled_minimums, saturday) == 0
    monday_one_am = datetime(2026, 11, 23, 1, 0, tzinfo=UTC)  # Sunday's window past midnight
    assert scheduled_minimum(service.scheduled_minimums, monday_one_am) == 2
    decision = decide(
        service,
        ScalerMemory(),
        load=Load(0, 0.0, 0.0),
        now=0,
        wall=MONDAY_NOON,
        current=1,
        ready=1,
    )
    assert decision.desired == 3
    assert "floor 3" in decision.describe()


def test_rate_metric() -> None:
    service = spec(autoscaling={"metric": "rps", "target": 10, "panicThreshold": 100})
    memory = ScalerMemory()
    current = 1
    for second in range(12):
        decision = decide(
            service,
            memory,
            load=Load(second, 0.0, 45.0),
            now=second,
            wall=MONDAY_NOON,
            current=current,
            ready=current,
        )
        current = decision.desired
    assert current == 5


def view(name: str, revision: str, ready: bool, at: float) -> ReplicaView:
    return ReplicaView(name, revision, ready, at)


def test_rollout_surges_then_removes_old_only_when_new_are_ready() -> None:
    rolling = RollingUpdate(max_surge=1, max_unavailable=0)
    old = [view("a", "r1", True, 1), view("b", "r1", True, 2)]
    first = plan(old, "r2", 2, rolling)
    assert first.create == 1 and first.remove == ()
    starting = [*old, view("c", "r2", False, 3)]
    assert plan(starting, "r2", 2, rolling).create == 0
    assert plan(starting, "r2", 2, rolling).remove == ()
    ready = [*old, view("c", "r2", True, 3)]
    assert plan(ready, "r2", 2, rolling).remove == ("a",)


def test_rollout_with_an_unavailable_budget_removes_first() -> None:
    rolling = RollingUpdate(max_surge=0, max_unavailable=1)
    old = [view("a", "r1", True, 1), view("b", "r1", True, 2)]
    first = plan(old, "r2", 2, rolling)
    assert first.create == 0 and first.remove == ("a",)


def test_plain_scaling_removes_not_ready_and_newest_first() -> None:
    rolling = RollingUpdate()
    replicas = [
        view("a", "r", True, 1),
        view("b", "r", True, 2),
        view("c", "r", False, 3),
        view("d", "r", True, 4),
    ]
    assert plan(replicas, "r", 2, rolling).remove == ("c", "d")
    assert plan(replicas, "r", 6, rolling).create == 2
