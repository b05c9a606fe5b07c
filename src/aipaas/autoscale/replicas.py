"""The replica autoscaler: a pure function of measurements and time (Knative's KPA with the
HPA's stabilisation windows and scale limits).

Each call takes the load observed now and the scaler's memory (``ScalerMemory``: recent load
samples, recent recommendations, recent desired counts) and returns a ``Decision``:

1. stable and panic averages of the metric over their windows; desired = ceil(load / target);
   requests waiting for a replica are demand for every metric (scale from zero with ``rps``);
   metric ``gpu`` is the replicas' summed GPU utilisation (the HPA's rule: desired =
   ceil(replicas x mean utilisation / target)); with no reading at all the count is held;
2. panic: when the panic window wants ``panicThreshold`` times the ready replicas, the panic
   recommendation is taken and nothing scales down until a stable window has passed calm;
3. bounds: at least minReplicas and the scheduled minimum now, at most maxReplicas;
4. stabilisation: a scale-up takes the lowest recommendation of its window, a scale-down the
   highest of its (a brief lull does not remove replicas);
5. limits: per period at most maxReplicas (or maxPercent of the count at the period's start)
   added or removed; the bounds of step 3 win over the limits;
6. wake: a request waiting while no replica is ready asks for one at once, past the windows.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo

from aipaas.api.service import ServiceSpec
from aipaas.api.service_scaling import (
    DAYS,
    Autoscaling,
    Metric,
    ScalingRules,
    ScheduledMinimum,
)


@dataclass(frozen=True)
class Load:
    """What the entry points measured at ``at`` (seconds): requests in flight (time-averaged)
    and answered per second; ``waiting``: requests waiting for a ready replica now (already
    part of the concurrency); ``in_flight``: requests held now."""

    at: float
    concurrency: float
    rate: float
    waiting: float = 0.0
    in_flight: float = 0.0
    #: the GPU utilisation of the service's running replicas, percent summed over replicas
    #: (a replica's own is the mean of its GPUs'); None where the backend cannot tell
    gpu_utilization: float | None = None


@dataclass
class ScalerMemory:
    """What one service's scaler remembers between calls (the controller keeps it)."""

    samples: deque[Load] = field(default_factory=deque)
    recommendations: deque[tuple[float, int]] = field(default_factory=deque)
    #: (time, desired) after each decision that changed the count
    changes: deque[tuple[float, int]] = field(default_factory=deque)
    panic_until: float | None = None


@dataclass(frozen=True)
class Decision:
    desired: int
    previous: int
    reason: str
    stable_load: float = 0.0
    panic_load: float = 0.0
    target: float = 0.0
    metric: str = ""
    recommended: int = 0
    floor: int = 0
    panic: bool = False

    @property
    def changed(self) -> bool:
        return self.desired != self.previous

    def describe(self) -> str:
        """The decision and its numbers, as an event's message."""
        text = f"{self.previous} -> {self.desired} replicas: {self.reason}"
        if self.metric:
            text += (
                f" ({self.metric} stable {self.stable_load:.2f}, panic {self.panic_load:.2f}, "
                f"target {self.target:g} per replica, recommended {self.recommended}, "
                f"floor {self.floor}{', panic mode' if self.panic else ''})"
            )
        return text


def scheduled_minimum(entries: list[ScheduledMinimum], now: datetime) -> int:
    """The largest scheduled minimum whose window holds ``now`` (0 when none does)."""
    best = 0
    for entry in entries:
        local = now.astimezone(ZoneInfo(entry.time_zone))
        start, end = entry.bounds()
        today = DAYS[local.weekday()]
        yesterday = DAYS[(local.weekday() - 1) % 7]
        clock = local.time().replace(tzinfo=None)
        if end is None or start < end:  # within one day
            inside = today in entry.days and clock >= start and (end is None or clock < end)
        else:  # past midnight: the evening of a listed day or the morning after it
            inside = (today in entry.days and clock >= start) or (
                yesterday in entry.days and clock < end
            )
        if inside:
            best = max(best, entry.replicas)
    return best


def decide(
    spec: ServiceSpec,
    memory: ScalerMemory,
    *,
    load: Load | None,
    now: float,
    wall: datetime,
    current: int,
    ready: int,
) -> Decision:
    """The desired replica count now. ``current``: the desired count decided before; ``ready``:
    replicas ready to serve; ``load``: this call's measurement (None: nothing measured);
    ``now``: seconds on the clock the windows are kept in; ``wall``: the time for schedules."""
    floor = max(spec.min_replicas, scheduled_minimum(spec.scheduled_minimums, wall))
    top = spec.replica_limit
    floor = min(floor, top)
    scaling = spec.autoscaling
    if scaling is None:
        return _remember(
            memory, now, Decision(floor, current, "minReplicas and schedule", floor=floor)
        )
    if load is not None:
        memory.samples.append(load)
    _forget(memory.samples, now - scaling.stable_window_seconds)
    if scaling.metric is Metric.GPU and not any(
        s.gpu_utilization is not None for s in memory.samples
    ):
        # Nothing read: neither up nor down on a guess (a replica at zero still wakes).
        held = max(min(max(current, floor), top), 1 if load and load.waiting > 0 else 0)
        decision = Decision(held, current, "no GPU utilisation reading: held", floor=floor)
        return _remember(memory, now, decision)
    stable = _average(memory.samples, now - scaling.stable_window_seconds, scaling)
    panic_load = _average(memory.samples, now - scaling.panic_window_seconds, scaling)
    wanted_stable = math.ceil(stable / scaling.target - 1e-9)
    wanted_panic = math.ceil(panic_load / scaling.target - 1e-9)
    if wanted_panic >= scaling.panic_threshold * max(ready, 1) and wanted_panic > current:
        memory.panic_until = now + scaling.stable_window_seconds
    panicking = memory.panic_until is not None and now < memory.panic_until
    if not panicking:
        memory.panic_until = None
    recommended = max(wanted_panic, current) if panicking else wanted_stable
    waiting = load.waiting if load is not None else 0.0
    if (panic_load > 0 or waiting > 0) and recommended == 0:
        recommended = 1  # requests wait: a service scaled to zero comes back at once
    bounded = min(max(recommended, floor), top)
    memory.recommendations.append((now, bounded))
    longest = max(
        scaling.scale_up.stabilization_window_seconds,
        scaling.scale_down.stabilization_window_seconds,
    )
    _forget_pairs(memory.recommendations, now - longest)
    stabilised = _stabilise(memory, now, current, bounded, scaling.scale_up, scaling.scale_down)
    limited = _limit(memory, now, current, stabilised, scaling.scale_up, scaling.scale_down)
    # A request waits and nothing serves: one replica now, whatever the windows say (the
    # wait is a cold start already; holding it for a window would only lengthen it).
    woken = 1 if waiting > 0 and ready == 0 else 0
    desired = min(max(limited, floor, woken), top)
    reason = (
        "a request waits: woken from zero"
        if desired == woken > current
        else _reason(
            current,
            desired,
            bounded,
            stabilised,
            limited,
            panicking,
            floor=floor,
            recommended=recommended,
        )
    )
    decision = Decision(
        desired,
        current,
        reason,
        stable_load=stable,
        panic_load=panic_load,
        target=scaling.target,
        metric=scaling.metric.value,
        recommended=recommended,
        floor=floor,
        panic=panicking,
    )
    return _remember(memory, now, decision)


def _remember(memory: ScalerMemory, now: float, decision: Decision) -> Decision:
    if not memory.changes:
        memory.changes.append((float("-inf"), decision.previous))  # the count found at first
    if decision.changed:
        memory.changes.append((now, decision.desired))
    while len(memory.changes) > 1024:
        memory.changes.popleft()
    return decision


def _forget(samples: deque[Load], before: float) -> None:
    while samples and samples[0].at < before:
        samples.popleft()


def _forget_pairs(pairs: deque[tuple[float, int]], before: float) -> None:
    while pairs and pairs[0][0] < before:
        pairs.popleft()


def _average(samples: deque[Load], since: float, scaling: Autoscaling) -> float:
    """The metric's mean over the samples since ``since``. Waiting requests are demand for
    every metric: in flight already for concurrency; for rps each one counts as a request per
    second (it came within the wait, and an answered-only rate is 0 while nothing serves)."""
    values = [_value(s, scaling) for s in samples if s.at >= since]
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else 0.0


def _value(sample: Load, scaling: Autoscaling) -> float | None:
    if scaling.metric is Metric.CONCURRENCY:
        return sample.concurrency
    if scaling.metric is Metric.RPS:
        return sample.rate + sample.waiting
    if sample.gpu_utilization is None:
        return None
    # A request waiting for a replica asks for one replica's worth: there is no room for it.
    return sample.gpu_utilization + scaling.target * sample.waiting


def _stabilise(
    memory: ScalerMemory,
    now: float,
    current: int,
    wanted: int,
    up: ScalingRules,
    down: ScalingRules,
) -> int:
    if wanted > current:
        window = [
            r for t, r in memory.recommendations if t >= now - up.stabilization_window_seconds
        ]
        return max(current, min(window, default=wanted))
    if wanted < current:
        since = now - down.stabilization_window_seconds
        window = [r for t, r in memory.recommendations if t >= since]
        return min(current, max(window, default=wanted))
    return wanted


def _count_at(memory: ScalerMemory, moment: float, current: int) -> int:
    """The desired count at ``moment`` (the earliest known when the memory starts later)."""
    count = memory.changes[0][1] if memory.changes else current
    for at, desired in memory.changes:
        if at > moment:
            break
        count = desired
    return count


def _allowed(rules: ScalingRules, base: int) -> int | None:
    limits = []
    if rules.max_replicas is not None:
        limits.append(rules.max_replicas)
    if rules.max_percent is not None:
        limits.append(max(1, math.ceil(base * rules.max_percent / 100)))
    return max(limits) if limits else None


def _limit(
    memory: ScalerMemory,
    now: float,
    current: int,
    wanted: int,
    up: ScalingRules,
    down: ScalingRules,
) -> int:
    if wanted > current:
        base = _count_at(memory, now - up.period_seconds, current)
        allowed = _allowed(up, base)
        return wanted if allowed is None else min(wanted, max(base + allowed, current))
    if wanted < current:
        base = _count_at(memory, now - down.period_seconds, current)
        allowed = _allowed(down, base)
        return wanted if allowed is None else max(wanted, min(base - allowed, current))
    return wanted


def _reason(
    current: int,
    desired: int,
    bounded: int,
    stabilised: int,
    limited: int,
    panicking: bool,
    *,
    floor: int,
    recommended: int,
) -> str:
    if desired == current:
        if bounded != current and stabilised == current:
            return "held by the stabilisation window"
        if stabilised != current and limited == current:
            return "held by the scale limit"
        return "steady"
    if desired == floor and floor > recommended:
        return "minimum (minReplicas or a scheduled minimum)"
    if limited != stabilised and desired == limited:
        return "scale limit reached"
    if panicking and desired > current:
        return "panic: a burst of load"
    return "load" if desired in (bounded, stabilised) else "bounds"
