"""Allocation and usage over time, per tenant and queue, for the dashboard's charts.

Derived from the usage ledger (store/ledger.py), which keeps every attempt that ran with its
start, its end and what it held, plus the attempts running now (their task records): the
history is exact and nothing samples in the background. A window of ``window`` seconds ending
now is cut into ``points`` buckets; each series gives, per bucket, the average allocated GPUs
and CPU cores and the GPU- and CPU-hours used from the window's start to the bucket's end.
Corrections carry no times: they change the usage report, not these curves.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from aipaas.api.node import Node
from aipaas.api.resources import cpu_milli
from aipaas.metering.usage import aware, live_entries, running_jobs
from aipaas.store import Store, TaskRepository
from aipaas.store.ledger_windows import attempts_ended_since

#: The most ledger entries one answer reads (the newest ending first): a bound on its cost.
MAX_ENTRIES: Final = 100_000


@dataclass(frozen=True)
class Interval:
    """What one attempt held, from start to end."""

    tenant: str
    queue: str
    start: datetime
    end: datetime
    gpus: float
    cpus: float


@dataclass
class Series:
    tenant: str
    queue: str
    gpu: list[float]
    cpu: list[float]
    gpu_hours: list[float] = field(default_factory=list)
    cpu_hours: list[float] = field(default_factory=list)


def timeline(store: Store, tenant: str | None, window: int, points: int) -> dict[str, Any]:
    """The timeline of ``tenant`` (None: every tenant) over the last ``window`` seconds."""
    end = store.clock.now()
    start = end - timedelta(seconds=window)
    intervals = [*ended_intervals(store, tenant, start), *running_intervals(store, tenant, end)]
    step = window / points
    series = bucketed(intervals, start, step, points)
    gpus, cpus = capacity(store.list_objects("Node", ""))
    return {
        "start": start.isoformat(),
        "end": end.isoformat(),
        "step": step,
        "times": [(start + timedelta(seconds=step * (i + 1))).isoformat() for i in range(points)],
        "capacity": {"gpu": gpus, "cpu": cpus},
        "series": [
            {
                "tenant": s.tenant,
                "queue": s.queue,
                "gpu": s.gpu,
                "cpu": s.cpu,
                "gpuHours": s.gpu_hours,
                "cpuHours": s.cpu_hours,
            }
            for s in series
        ],
    }


def ended_intervals(store: Store, tenant: str | None, since: datetime) -> list[Interval]:
    """Ledger attempts that ended at or after ``since``."""
    return [
        Interval(
            a.tenant, a.queue, a.started_at, a.ended_at, a.gpu_milli / 1000, a.cpu_milli / 1000
        )
        for a in attempts_ended_since(store, tenant, since, MAX_ENTRIES)
    ]


def running_intervals(store: Store, tenant: str | None, now: datetime) -> list[Interval]:
    """The attempts running now, from their start to ``now``."""
    records = [
        r
        for r in TaskRepository(store).active()
        if (tenant is None or r.tenant == tenant) and r.phase == "Running"
    ]
    entries = live_entries(records, running_jobs(store, records), {}, now)
    return [
        Interval(
            e.tenant, e.queue, aware(e.started_at), now, e.gpu_milli / 1000, e.cpu_milli / 1000
        )
        for e in entries
        if e.started_at is not None
    ]


def bucketed(
    intervals: Iterable[Interval], start: datetime, step: float, points: int
) -> list[Series]:
    """Per (tenant, queue): average GPUs and CPUs held in each bucket, and the hours used from
    ``start`` to each bucket's end."""
    found: dict[tuple[str, str], Series] = {}
    for interval in intervals:
        key = (interval.tenant, interval.queue)
        series = found.get(key)
        if series is None:
            series = found[key] = Series(*key, [0.0] * points, [0.0] * points)
        begin = (interval.start - start).total_seconds()
        finish = (interval.end - start).total_seconds()
        first, last = max(int(begin // step), 0), min(int(finish // step), points - 1)
        for i in range(first, last + 1):
            overlap = min(finish, (i + 1) * step) - max(begin, i * step)
            if overlap > 0:
                series.gpu[i] += interval.gpus * overlap / step
                series.cpu[i] += interval.cpus * overlap / step
    for series in found.values():
        series.gpu_hours = cumulative(series.gpu, step)
        series.cpu_hours = cumulative(series.cpu, step)
        series.gpu = [round(v, 6) for v in series.gpu]
        series.cpu = [round(v, 6) for v in series.cpu]
    return [found[key] for key in sorted(found)]


def cumulative(averages: Sequence[float], step: float) -> list[float]:
    """Hours used up to each bucket's end, from per-bucket averages held."""
    total, out = 0.0, []
    for average in averages:
        total += average * step / 3600
        out.append(round(total, 6))
    return out


def capacity(nodes: Iterable[object]) -> tuple[float, float]:
    """GPUs and CPU cores of the ready nodes."""
    gpus = cpus = 0.0
    for node in nodes:
        if isinstance(node, Node) and (node.status is None or node.status.ready):
            gpus += node.spec.gpus.count
            cpus += cpu_milli(node.spec.cpu) / 1000
    return gpus, cpus
