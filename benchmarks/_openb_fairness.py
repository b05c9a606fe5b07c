"""Jain's fairness index of the openb replay (benchmarks/batch_openb.py), per window of trace time.

Two definitions, both over the windows where at least two tenants had a job waiting:

* ``normalised`` (the one the targets are judged by): Jain's own definition (Jain, Chiu and Hawe
  1984) takes x_i = allocation_i / fair allocation_i. The fair allocation of a window is the
  max-min (water-filling) split of the cluster's GPU-time in it among the tenants with demand,
  each capped by its demand, equal weights; a tenant's demand is the GPU-time its jobs asked
  for while waiting or running in the window. A tenant that asked for little and got all of it
  is treated fairly.
* ``raw``: Jain over the tenants' GPU-time itself, among the tenants with work in the window
  (what this benchmark reported first): a tenant that asks for less than an equal split lowers
  the index though nobody treated it unfairly, so it is an upper bound on the unfairness.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from _batch_run import RunOutcome, jain, mean


@dataclass(frozen=True)
class Fairness:
    normalised: float
    raw: float
    windows: int


def water_fill(capacity: float, demands: Sequence[float]) -> list[float]:
    """Max-min fair split of ``capacity`` among equal-weight claimants capped by demand."""
    share = [0.0] * len(demands)
    open_ = [i for i, d in enumerate(demands) if d > 0]
    left = capacity
    while open_ and left > 1e-9:
        each = left / len(open_)
        capped = [i for i in open_ if demands[i] - share[i] <= each]
        if not capped:
            for i in open_:
                share[i] += each
            break
        for i in capped:
            left -= demands[i] - share[i]
            share[i] = demands[i]
        open_ = [i for i in open_ if i not in capped]
    return share


def _spread(
    table: list[list[float]], tenant: int, start: float, end: float, rate: float, window: float
) -> None:
    """Adds rate x (overlap of [start, end) with each window) to the tenant's cells."""
    for i in range(int(start // window), min(len(table) - 1, int(end // window)) + 1):
        overlap = min(end, (i + 1) * window) - max(start, i * window)
        if overlap > 0:
            table[i][tenant] += rate * overlap


def fairness(
    outcome: RunOutcome, gpus_of: Mapping[str, float], tenants: int, gpus: int, window: float
) -> Fairness:
    """``gpus_of``: job key -> the GPUs it asks for; ``gpus``: the cluster's GPUs."""
    end = max((s.end for s in outcome.segments), default=0.0)
    count = int(end // window) + 1
    use = [[0.0] * tenants for _ in range(count)]
    demand = [[0.0] * tenants for _ in range(count)]
    waiting = [set[int]() for _ in range(count)]
    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in outcome.segments:
        tenant = int(s.job.split("/")[0][1:])
        runs[s.job].append((s.start, s.end))
        _spread(use, tenant, s.start, s.end, s.gpu_milli / 1000, window)
        _spread(demand, tenant, s.start, s.end, s.gpu_milli / 1000, window)
    for key, job in outcome.jobs.items():
        tenant = int(key.split("/")[0][1:])
        at = job.submitted
        gaps = []
        for start, stop in sorted(runs.get(key, [])):
            gaps.append((at, start))
            at = stop
        if job.finished is None:
            gaps.append((at, end))
        for wait_from, wait_to in gaps:
            if wait_to <= wait_from:
                continue
            _spread(demand, tenant, wait_from, wait_to, gpus_of[key], window)
            for i in range(int(wait_from // window), min(count - 1, int(wait_to // window)) + 1):
                if min(wait_to, (i + 1) * window) > max(wait_from, i * window):
                    waiting[i].add(tenant)
    normalised, raw = [], []
    for i in range(count):
        if len(waiting[i]) < 2:
            continue
        with_demand = [t for t in range(tenants) if demand[i][t] > 0]
        fair = water_fill(gpus * window, [demand[i][t] for t in with_demand])
        normalised.append(
            jain([use[i][t] / f for t, f in zip(with_demand, fair, strict=True) if f > 0])
        )
        raw.append(jain([use[i][t] for t in with_demand]))
    return Fairness(mean(normalised), mean(raw), len(normalised))
