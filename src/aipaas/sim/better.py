"""fgd beside ours (``fgdx``, the ``best`` alias) on the given openb workloads and our variants.

One row per workload: the mean GPU allocation % at 100% arrived over the seeds for both, their
difference and the mean replay seconds of each. Variants (``sim/variants.py``) are written to a
folder on demand, so only the recipe is kept in the repository.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aipaas.sim.experiment import OpenbRun, run_many
from aipaas.sim.openb import load_nodes, load_pods
from aipaas.sim.replay import ReplayResult
from aipaas.sim.report import value_at
from aipaas.sim.variants import VARIANTS, Variant, write_variants

GIVEN = (
    "default",
    "cpu050",
    "cpu100",
    "cpu200",
    "gpushare40",
    "gpushare60",
    "gpushare80",
    "gpuspec10",
    "multigpu20",
    "multigpu30",
    "multigpu40",
)
BASELINE = "fgd"
OURS = "fgdx"
NODES_CSV = "openb_node_list_gpu_node.csv"


@dataclass(frozen=True)
class Row:
    workload: str
    built: str  # how the workload was made ("given" for the paper's own)
    fgd: float
    ours: float
    fgd_s: float
    ours_s: float

    @property
    def gain(self) -> float:
        return self.ours - self.fgd


def variant_files(
    data: str | Path, folder: str | Path, variants: Sequence[Variant] = VARIANTS
) -> dict[str, Path]:
    """Write the variants from ``data``'s default trace into ``folder``; name -> pods CSV."""
    nodes = load_nodes(Path(data) / NODES_CSV)
    base = load_pods(Path(data) / "openb_pod_list_default.csv", nodes)
    return write_variants(base, nodes, folder, variants)


def workload_paths(
    data: str | Path, given: Sequence[str], variants: dict[str, Path]
) -> dict[str, Path]:
    paths = {w: Path(data) / f"openb_pod_list_{w}.csv" for w in given}
    return {**paths, **variants}


def runs_for(
    data: str | Path, paths: dict[str, Path], policies: Sequence[str], seeds: Sequence[int]
) -> list[OpenbRun]:
    nodes = str(Path(data) / NODES_CSV)
    return [
        OpenbRun(nodes, str(path), p, s, 1.3)
        for path in paths.values()
        for p in policies
        for s in seeds
    ]


def rows_from(
    paths: dict[str, Path],
    runs: Sequence[OpenbRun],
    results: Sequence[ReplayResult],
    built: dict[str, str],
) -> list[Row]:
    """A row per workload of ``paths`` from the fgd and ours results among ``results``."""
    by_path = {str(p): w for w, p in paths.items()}
    values: dict[tuple[str, str], list[float]] = {}
    seconds: dict[tuple[str, str], list[float]] = {}
    for run, result in zip(runs, results, strict=True):
        key = (by_path[run.pods_csv], run.policy)
        values.setdefault(key, []).append(value_at(result.curve, 100) or 0.0)
        seconds.setdefault(key, []).append(result.elapsed_s)
    return [
        Row(
            w,
            built.get(w, "given"),
            statistics.fmean(values[(w, BASELINE)]),
            statistics.fmean(values[(w, OURS)]),
            statistics.fmean(seconds[(w, BASELINE)]),
            statistics.fmean(seconds[(w, OURS)]),
        )
        for w in paths
    ]


def better_rows(
    data: str | Path,
    folder: str | Path,
    seeds: Sequence[int],
    jobs: int,
    on_done: Callable[[ReplayResult], None] | None = None,
    given: Sequence[str] = GIVEN,
    variants: Sequence[Variant] = VARIANTS,
) -> list[Row]:
    """Replay fgd and ours on every given workload and variant, every seed."""
    files = variant_files(data, folder, variants)
    paths = workload_paths(data, given, files)
    runs = runs_for(data, paths, (BASELINE, OURS), seeds)
    results = run_many(runs, jobs, on_done)
    return rows_from(paths, runs, results, {v.name: v.describe() for v in variants})


def better_table(rows: Sequence[Row], seeds: Sequence[int]) -> list[str]:
    """Markdown: the side-by-side table, then means by group and the replay-time ratio."""
    lines = [
        f"| workload | built | {BASELINE} | {OURS} | difference | s/run {BASELINE} | "
        f"s/run {OURS} |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.workload} | {r.built} | {r.fgd:.2f} | {r.ours:.2f} | {r.gain:+.2f} | "
            f"{r.fgd_s:.1f} | {r.ours_s:.1f} |"
        )
    given = [r.gain for r in rows if r.built == "given"]
    ours = [r.gain for r in rows if r.built != "given"]
    every = [r.gain for r in rows]
    time_ratio = sum(r.ours_s for r in rows) / max(sum(r.fgd_s for r in rows), 1e-9)
    lines.append("")
    lines.append(
        f"Seeds {seeds[0]}-{seeds[-1]}, tune 1.3, at 100% arrived. Mean difference: "
        f"{statistics.fmean(every):+.2f} points over all {len(every)} workloads"
        + (f", {statistics.fmean(given):+.2f} over the {len(given)} given" if given else "")
        + (f", {statistics.fmean(ours):+.2f} over our {len(ours)} variants" if ours else "")
        + f"; smallest {min(every):+.2f}; workloads where {OURS} is below {BASELINE}: "
        f"{sum(g < 0 for g in every)}. Replay time {OURS} / {BASELINE}: {time_ratio:.2f}."
    )
    return lines
