"""The high class's floor on the openb replay (benchmarks/batch_openb.py): the high pods alone.

High pods (QoS LS and Guaranteed) are not preemptible and all of one priority, so no policy can
start one before another high pod ends: what they wait for one another, with nothing else
offered, is the least any policy can give them at that size (given how ``default`` orders and
places them among themselves). Cheap to measure at every size (about half of the pods, none of
the preemptible backlog), it says at which sizes the target of a high-priority p99 queueing delay
under 60 s is one a policy can meet at all: on a small slice a burst of high pods alone outgrows
the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from _batch_run import run_observed
from batch_openb import QOS, Row, Setup, Size, Workload, measure, scenario, workload


@dataclass(frozen=True)
class Floor:
    size: Size
    nodes: int
    gpus: int
    pods: int  # all pods of the size
    high: int  # its high pods (the ones replayed)
    span_hours: float  # the arrival span at this load
    row: Row


def high_floor(data: Path, size: Size, load: float, seed: int, setup: Setup) -> Floor:
    """The high-class pods alone, at the same arrival times, under ``default``."""
    w = workload(data, size, load, seed, setup.queues)
    alone = [p for p in w.pods if QOS[p.qos][0] == "high"]
    only = Workload(w.nodes, alone, w.arrivals, w.tenants, w.queues, w.span, w.gpus)
    outcome = run_observed(scenario(only, "default", setup))
    row = measure(only, "default, high pods alone", load, outcome)
    return Floor(size, len(w.nodes), w.gpus, len(w.pods), len(alone), w.span / 3600, row)


def floor_table(floors: list[Floor]) -> str:
    lines = [
        "| size | nodes | GPUs | pods | high pods | arrival span h | high avg s | high p99 s "
        "| wall s | CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in floors:
        avg, p99 = f.row.delay["high"]
        lines.append(
            f"| {f.size.label()} | {f.nodes:,} | {f.gpus:,} | {f.pods:,} | {f.high:,} "
            f"| {f.span_hours:.1f} | {avg:,.0f} | {p99:,.0f} | {f.row.wall:.0f} | {f.row.cpu:.0f} |"
        )
    return "\n".join(lines)
