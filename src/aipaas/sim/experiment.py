"""One openb experiment end to end: load, build arrivals, replay; and many of them in parallel."""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from aipaas.sim.arrivals import (
    arrivals_from_file,
    paper_arrivals,
    paper_tiebreak_rank,
    tiebreak_rank_from_file,
)
from aipaas.sim.openb import load_nodes, load_pods
from aipaas.sim.replay import ProgressCallback, ReplayResult, replay
from aipaas.sim.report import value_at


@dataclass(frozen=True)
class OpenbRun:
    nodes_csv: str
    pods_csv: str
    policy: str
    seed: int = 42
    tune: float = 1.3
    arrival_order: str | None = None
    node_order: str | None = None


def run_openb(run: OpenbRun, on_progress: ProgressCallback | None = None) -> ReplayResult:
    nodes = load_nodes(run.nodes_csv)
    pods = load_pods(run.pods_csv, nodes)
    total_gpu_milli = sum(n.gpu_count for n in nodes) * 1000
    if run.arrival_order:
        arrivals = arrivals_from_file(run.arrival_order, pods)
    else:
        arrivals = paper_arrivals(pods, total_gpu_milli, run.seed, run.tune)
    if run.node_order:
        rank = tiebreak_rank_from_file(run.node_order, nodes)
    else:
        rank = paper_tiebreak_rank(nodes, run.seed)
    return replay(
        nodes,
        pods,
        arrivals,
        run.policy,
        seed=run.seed,
        tune=run.tune,
        tiebreak_rank=rank,
        on_progress=on_progress,
    )


def run_many(
    runs: Sequence[OpenbRun],
    jobs: int | None = None,
    on_done: Callable[[ReplayResult], None] | None = None,
) -> list[ReplayResult]:
    """Run experiments in worker processes; results come back in the order of ``runs``."""
    jobs = jobs or os.cpu_count() or 1
    if jobs == 1:
        results = []
        for run in runs:
            results.append(run_openb(run))
            if on_done:
                on_done(results[-1])
        return results
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_openb, run) for run in runs]
        results = []
        for future in futures:
            results.append(future.result())
            if on_done:
                on_done(results[-1])
        return results


def mean_at(results: Sequence[ReplayResult], pct: int) -> float | None:
    values = [v for r in results if (v := value_at(r.curve, pct)) is not None]
    return statistics.fmean(values) if values else None


def workload_name(pods_csv: str) -> str:
    """'openb_pod_list_gpushare40.csv' -> 'gpushare40'."""
    stem = Path(pods_csv).stem
    return stem.removeprefix("openb_pod_list_")
