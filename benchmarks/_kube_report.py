"""The rows of benchmarks/kube_side_by_side.py and their table: one row per scheduler and
scenario, then the issue's targets, each held or missed and by how much, from the same rows.

Who calls it: benchmarks/kube_side_by_side.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

#: the openb target: aipaas's GPU allocation this many points above kube-scheduler's
OPENB_POINTS = 3.0


@dataclass
class Run:
    scheduler: str
    scenario: str
    pods: int = 0
    bound: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    requests: int = 0
    cpu_seconds: float = 0.0
    gangs_whole: int = 0
    gangs_partial: int = 0
    gangs_none: int = 0
    #: openb: GPUs the bound pods asked for, of how many, and the first pod refused
    gpus_bound: float = 0.0
    gpus_total: int = 0
    first_refused: str = ""
    #: openb: the time limit ended the replay before a pod was refused (the allocation is a
    #: lower bound of the allocation at the first refusal)
    lower_bound: bool = False

    @property
    def rate(self) -> float:
        return self.bound / self.seconds if self.seconds else 0.0

    def quantile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)]

    @property
    def allocation(self) -> float:
        """openb: percent of the cluster's GPUs the bound pods asked for."""
        return 100 * self.gpus_bound / self.gpus_total if self.gpus_total else float("nan")


def table(runs: Sequence[Run]) -> str:
    lines = [
        "| scenario | scheduler | pods | bound | pods bound/s | p50 create→bind s "
        "| p99 create→bind s | API requests per bound pod | scheduler CPU s "
        "| gangs whole / partly / none | GPU allocation at first refusal |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in runs:
        gangs = (
            f"{r.gangs_whole} / {r.gangs_partial} / {r.gangs_none}" if r.scenario == "gangs" else ""
        )
        alloc = ""
        if r.scenario == "openb" and r.gpus_total:
            alloc = f"{r.allocation:.1f}% ({r.gpus_bound:,.1f} of {r.gpus_total:,} GPUs; "
            alloc += f"{r.first_refused} refused)" if r.first_refused else "none refused yet)"
            if r.lower_bound:
                alloc = "at least " + alloc
        per_pod = r.requests / r.bound if r.bound else float("nan")
        lines.append(
            f"| {r.scenario} | {r.scheduler} | {r.pods:,} | {r.bound:,} | {r.rate:.1f} "
            f"| {r.quantile(0.5):.2f} | {r.quantile(0.99):.2f} | {per_pod:.1f} "
            f"| {r.cpu_seconds:.1f} | {gangs} | {alloc} |"
        )
    return "\n".join(lines)


def targets(runs: Sequence[Run]) -> str:
    """Issue 26's targets, each held or missed (and by how much), from ``runs``."""
    rows = {(r.scenario, r.scheduler): r for r in runs}
    lines = ["| target (issue 26) | measured | held? |", "|---|---|---|"]
    ours, theirs = rows.get(("single", "aipaas")), rows.get(("single", "kube-scheduler"))
    if ours is not None and theirs is not None:
        gap = theirs.rate - ours.rate
        verdict = (
            "held"
            if gap <= 0
            else (
                f"**missed** by {gap:.1f} pods/s ({100 * ours.rate / theirs.rate:.0f}% of "
                "kube-scheduler's rate)"
            )
        )
        lines.append(
            "| DRA pods bound per second at least kube-scheduler's "
            f"| {ours.rate:.1f} against {theirs.rate:.1f} | {verdict} |"
        )
        ours99, theirs99 = ours.quantile(0.99), theirs.quantile(0.99)
        gap = ours99 - theirs99
        verdict = "held" if gap <= 0 else f"**missed** by {gap:.1f} s ({ours99 / theirs99:.1f}x)"
        lines.append(
            "| p99 creation-to-binding no worse "
            f"| {ours99:.2f} s against {theirs99:.2f} s | {verdict} |"
        )
    ours, theirs = rows.get(("openb", "aipaas")), rows.get(("openb", "kube-scheduler"))
    if ours is not None and theirs is not None:
        points = ours.allocation - theirs.allocation
        verdict = (
            "held"
            if points >= OPENB_POINTS
            else (f"**missed** by {OPENB_POINTS - points:.1f} points")
        )
        lines.append(
            f"| openb replay: GPU allocation at least {OPENB_POINTS:.0f} points above "
            f"kube-scheduler's | {'at least ' if ours.lower_bound else ''}"
            f"{ours.allocation:.1f}% against {theirs.allocation:.1f}% "
            f"({points:+.1f} points) | {verdict} |"
        )
    ours = rows.get(("gangs", "aipaas"))
    if ours is not None:
        verdict = (
            "held"
            if ours.gangs_partial == 0
            else (f"**missed**: {ours.gangs_partial} partly bound")
        )
        gangs = ours.gangs_whole + ours.gangs_partial + ours.gangs_none
        lines.append(
            f"| no gang ends partly bound | aipaas: {ours.gangs_partial} of {gangs} partly bound "
            f"| {verdict} |"
        )
    return "\n".join(lines)
