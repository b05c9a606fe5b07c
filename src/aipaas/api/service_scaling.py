"""How a Service's replica count follows its load: the autoscaling block of its spec, and the
scheduled minimums (more replicas in office hours).

Knative's and KEDA's model: a target of concurrency (requests in flight) or of request rate per
replica, or the HPA's GPU utilisation (percent per replica, summed over the replicas that run);
desired = ceil(observed / target). A stable window averages the load; a short panic
window reacts to bursts; scale-up and scale-down each have a stabilisation window (the HPA's:
the highest recommendation of the window holds a scale-down back) and a limit per period.
"""

from __future__ import annotations

import re
from datetime import time
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from aipaas.api.meta import Model

MAX_WINDOW_SECONDS = 3600.0
_CLOCK_RE = re.compile(r"([01]\d|2[0-3]):([0-5]\d)")
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


class Metric(StrEnum):
    CONCURRENCY = "concurrency"  # requests in flight per replica
    RPS = "rps"  # requests per second per replica
    GPU = "gpu"  # utilisation of a replica's GPUs, percent (where the backend can tell)


class ScalingRules(Model):
    """One direction's rules (HPA behaviour): how long a change must be wanted before it is
    made, and how many replicas one period may add or remove (the larger of the two limits
    when both are given; none given: no limit)."""

    stabilization_window_seconds: float = Field(default=0.0, ge=0, le=MAX_WINDOW_SECONDS)
    max_replicas: int | None = Field(default=None, ge=1, le=1000, strict=True)
    max_percent: float | None = Field(default=None, gt=0, le=10000)
    period_seconds: float = Field(default=15.0, gt=0, le=MAX_WINDOW_SECONDS)


def _scale_down_default() -> ScalingRules:
    return ScalingRules(stabilization_window_seconds=30.0)


class Autoscaling(Model):
    metric: Metric = Metric.CONCURRENCY
    #: the load one replica should carry (requests in flight, or requests per second)
    target: float = Field(gt=0, le=100000)
    stable_window_seconds: float = Field(default=60.0, gt=0, le=MAX_WINDOW_SECONDS)
    panic_window_seconds: float = Field(default=6.0, gt=0, le=MAX_WINDOW_SECONDS)
    #: panic when the panic window wants this many times the replicas that are ready
    panic_threshold: float = Field(default=2.0, ge=1.0, le=100)
    scale_up: ScalingRules = Field(default_factory=ScalingRules)
    scale_down: ScalingRules = Field(default_factory=_scale_down_default)

    @model_validator(mode="after")
    def _windows(self) -> Autoscaling:
        if self.metric is Metric.GPU and self.target > 100:
            raise ValueError(
                f"target: {self.target:g} is more than 100 (metric gpu is a utilisation in "
                "percent per replica)"
            )
        if self.panic_window_seconds > self.stable_window_seconds:
            raise ValueError(
                f"panicWindowSeconds: {self.panic_window_seconds:g} is longer than "
                f"stableWindowSeconds ({self.stable_window_seconds:g}); the panic window is the "
                "short one"
            )
        return self


def _check_clock(value: str) -> str:
    if not _CLOCK_RE.fullmatch(value) and value != "24:00":
        raise ValueError(f"must be a time of day as HH:MM (00:00 to 24:00), got {value!r}")
    return value


def _check_days(value: list[str]) -> list[str]:
    for day in value:
        if day not in DAYS:
            raise ValueError(f"{day!r} is not a day; use {', '.join(DAYS)}")
    if len(set(value)) != len(value):
        raise ValueError("a day is listed twice")
    return value


def _check_zone(value: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as err:
        raise ValueError(f"unknown time zone {value!r}") from err
    return value


ClockTime = Annotated[str, AfterValidator(_check_clock)]


class ScheduledMinimum(Model):
    """At least ``replicas`` from ``start`` to ``end`` (a window past midnight when end is
    before start) on the given days, in ``timeZone``."""

    replicas: int = Field(ge=0, le=1000, strict=True)
    start: ClockTime
    end: ClockTime
    days: Annotated[list[str], AfterValidator(_check_days)] = Field(
        default_factory=lambda: list(DAYS), min_length=1, max_length=7
    )
    time_zone: Annotated[str, AfterValidator(_check_zone)] = "UTC"

    @model_validator(mode="after")
    def _not_empty(self) -> ScheduledMinimum:
        if self.start == self.end:
            raise ValueError("start and end are the same time: the window would be empty")
        return self

    def bounds(self) -> tuple[time, time | None]:
        """start and end as times of day; None for an end of 24:00."""
        return _clock(self.start), None if self.end == "24:00" else _clock(self.end)


def _clock(text: str) -> time:
    if text == "24:00":
        return time(0, 0)
    hours, minutes = text.split(":")
    return time(int(hours), int(minutes))
