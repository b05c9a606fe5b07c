"""Regenerates docs/results/scheduling.md: the batch-scheduling measurements of issue 11.

    .venv/bin/python benchmarks/scheduling_tables.py [--full [SECTIONS]] [--only SECTIONS]
        [--out docs/results/scheduling.md]

Runs, in this process and in order: the Kueue scalability scenario (kueue_scale.py; ``--full``
adds the 1,000-queue, 50,000-job variant), the openb time-based replay under fifo, volcano and
default at loads 0.7, 0.9 and 1.1 on batch_openb's default set-up, the high pods alone (their
floor) at every size of batch_openb.FLOOR_SIZES, other set-ups for default at 0.9 and the quick
slice at 0.9 (batch_openb.py; the ``wide`` size by default, ``--full`` all 8,152 pods on a
38-node slice), and one cycle of the live controller
in a full cluster (controller_cycle.py --batch; quick: 2,000 pending, 200 running on 200 nodes,
40 queues; ``--full``: 10,000 / 1,000 / 1,000 / 200). ``--full`` alone makes every section full
size; ``--full kueue,controller`` only those (the full openb replay takes hours on two shared
cores). Each table is printed as it is made, then the file is written with the command that made
it. With ``--only`` naming some of the sections and the file already there, only those sections
are replaced in it (each then says the command that made it); the rest is kept.
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import _batch_cycle
import _openb_floor
import batch_openb
import kueue_scale

ROOT = Path(__file__).resolve().parents[1]


def kueue_section(full: bool) -> str:
    rows = [
        ("baseline", kueue_scale.BASELINE, kueue_scale.run(kueue_scale.BASELINE, "default", False))
    ]
    if full:
        rows.append(
            ("1,000 queues", kueue_scale.BIG, kueue_scale.run(kueue_scale.BIG, "default", False))
        )
    verdicts = [
        f"- {label}: {kueue_scale.verdict(shape, m, 10.0 if label == 'baseline' else 60.0)}"
        for label, shape, m in rows
    ]
    return "\n".join(
        [
            "## Kueue's scheduler scalability scenario (benchmarks/kueue_scale.py)",
            "",
            "5 parent queues x 6 leaf queues (20 CPU guaranteed, 120 CPU quota each; a parent's "
            "quota is its 120 CPU, as a Kueue cohort lends nothing to another), 10 nodes of "
            "60 CPU, "
            "per leaf 350 small (1 CPU, every 100 ms, 200 ms, priority 50), 100 medium (5 CPU, "
            "500 ms, 500 ms, 100) and 50 large (20 CPU, 1.2 s, 1 s, 200) jobs, profile `default`, "
            "through `simulate run`'s functions on a virtual clock. Times to admission are virtual "
            "seconds (Kueue's are real seconds of a throughput-bound run: large 6.7, medium 77, "
            "small 215, wall 351 s, usage 58.7%). Usage: CPU-seconds of every run (evicted runs "
            "too) over 600 CPU x (last finish - first arrival).",
            "",
            kueue_scale.table(rows),
            "",
            *verdicts,
            "",
            "The order comes from the head hold (docs/scheduling.md, allocate; `holdForHead`): a "
            "large job that could preempt holds back its queue's lower-priority jobs, which "
            "borrow only what is idle beyond what waiting heads ask for. Before it (commit "
            "a498eda, same scenario) small jobs slipped into every gap: large 5.72 s, medium "
            "3.90 s, small 0.18 s, 138 evictions, 98.8% usage, 7.19 s wall. What the hold "
            "costs is the backlog, not the hold itself: the cluster is offered ~118% of its "
            "CPU while the streams run, so under strict priority the small jobs wait for the "
            "medium stream to end and thousands of them are pending in each cycle. The "
            "simulator keeps that backlog grouped across cycles (batch/backlog_book.py: waiting "
            "jobs by leaf, priority and gang, in submission order); a session takes it from "
            "there instead of walking it, enqueue judges a group at once and allocate orders a "
            "group as one run (batch/ordering_groups.py), so a cycle costs what changed and the "
            "groups, not the pending jobs; the decisions are those of a session that walks "
            "every job (tests/unit/scheduler/batch/test_backlog_book_same_decisions.py). "
            "`kueue_scale.py --profile FILE` with `holdForHead: false` in the "
            "profile's `spec.batch` runs the old behaviour.",
        ]
    )


#: the set-ups compared for ``default`` at 0.9 besides the default one
OPENB_SETUPS = (
    batch_openb.Setup("class", 0.25),
    batch_openb.Setup("qos", 0.25),
)
#: what each queue layout is, in the doc's words
SETUP_WORDS = {
    "tenant": "Each tenant has one queue, every class in it: a tenant's high jobs preempt its "
    "own normal and low jobs by priority inside the leaf, and reclaim from tenants above "
    "their share.",
    "class": "Each tenant has a queue `svc` (the high class, queue priority 1: above "
    "guarantees its sibling gets capacity only after it) and a queue `batch` (normal and low).",
    "qos": "Each tenant has a queue `svc` (the high class) and a queue `batch` (normal and "
    "low), of equal queue priority.",
    "random": "Each tenant has two queues `a` and `b`, each job in one by a seeded coin.",
}


def openb_section(full: bool, data: Path) -> str:
    size = batch_openb.FULL if full else batch_openb.WIDE
    setup = batch_openb.Setup()
    policies = ["fifo", "volcano", "default"]
    rows = batch_openb.run_all(data, size, [0.7, 0.9, 1.1], policies, 42, setup)
    floors = [_openb_floor.high_floor(data, s, 0.9, 42, setup) for s in batch_openb.FLOOR_SIZES]
    floor_here = next(f for f in floors if f.size == size)
    study = [
        replace(row, policy=f"default: {each.label()}")
        for each in OPENB_SETUPS
        for row in batch_openb.run_all(data, size, [0.9], ["default"], 42, each)
    ]
    quick = batch_openb.run_all(data, batch_openb.QUICK, [0.9], ["fifo", "default"], 42, setup)
    quick_floor = next(f for f in floors if f.size == batch_openb.QUICK)
    return "\n".join(
        [
            "## openb trace replayed in time (benchmarks/batch_openb.py)",
            "",
            f"Size: {size.label()} ({floor_here.pods:,} pods, {floor_here.nodes} nodes, "
            f"{floor_here.gpus} GPUs; arrivals over {floor_here.span_hours:.1f} h at load 0.9). "
            "Why this size: the high class alone queues with a p99 of "
            f"{floor_here.row.delay['high'][1]:,.0f} s here (the floor, below), so the 60 s "
            "target is one a policy can meet; on the quick slice (every 128th node) and with all "
            "pods on every 32nd node a burst of high pods alone outgrows the slice (floors of "
            "hundreds of seconds), and all pods on every 8th node, where the floor is 0 s too, "
            "is a replay of hours on this machine. "
            "Arrivals in creation order compressed to the target load "
            "(offered GPU-time / (cluster GPUs x arrival span)), durations = deletion - creation "
            "capped at 4 h, QoS LS/Guaranteed -> priority 1000 (class high) not preemptible, "
            "Burstable -> 100 (normal), BE -> 0 (low), both preemptible; 4 tenants of equal "
            "weight (seeded choice); timeLimit = duration rounded up to a minute. Times in trace "
            "seconds. Jain: per 1-hour window, mean over windows where at least two tenants had "
            "a job waiting (their count in brackets), of Jain's index of x_i = tenant GPU-time / "
            "its max-min fair share of the window's GPU-time capped by its demand (Jain's own "
            "normalised definition); `Jain raw`: of the GPU-time itself among tenants with work "
            "(penalises a tenant that simply asked for less). Wall and CPU seconds of one replay "
            "(CPU: this process; the machine is shared, so wall time includes others' load). "
            "Why each choice: the module's docstring.",
            "",
            f"### Set-up used by default (every policy): {setup.label()}",
            "",
            f"{SETUP_WORDS[setup.queues]} Each tenant has {setup.guarantee:.0%} of the GPUs "
            "guaranteed, so the guarantees cover the cluster and reclaim reaches any tenant "
            "below its share. Why this layout: of the three compared below at load 0.9 it "
            "gives the high class the shortest tail and stays fair; it is also the simplest a "
            "platform team sets (a queue per team, priority classes for its services).",
            "",
            batch_openb.table(rows),
            "",
            *(f"- {line}" for line in batch_openb.verdicts(rows)),
            f"- {_openb_gap(rows, floor_here)}",
            "",
            "### The high class's floor, by size (benchmarks/_openb_floor.py)",
            "",
            "The high-class pods alone, at the same arrival times, under `default` at load 0.9 "
            "(the load of the whole workload; the high class is about 60% of it). High pods are "
            "not preemptible and of equal priority, so no policy can start one before another "
            "high pod ends: their p99 here is the least any policy can give them at that size.",
            "",
            _openb_floor.floor_table(floors),
            "",
            "### Set-ups compared (`default` at load 0.9)",
            "",
            "`class`: svc and batch queues per tenant, svc with queue priority 1; `qos`: the "
            "same without queue priority (`tenant`, one queue per tenant, is the default set-up "
            "above). "
            "minRuntime (`--min-runtime`, protecting a job from preemption for that long) is "
            "left out: it can only delay preemptors.",
            "",
            batch_openb.table(study),
            "",
            f"### The quick slice ({batch_openb.QUICK.label()}: {quick_floor.pods:,} pods, "
            f"{quick_floor.nodes} nodes, {quick_floor.gpus} GPUs), load 0.9",
            "",
            "The size this section used before: its floor of "
            f"{quick_floor.row.delay['high'][1]:,.0f} s puts the 60 s target out of reach "
            "there whatever the policy.",
            "",
            batch_openb.table(quick),
            "",
            *(f"- {line}" for line in batch_openb.verdicts(quick)),
        ]
    )


def _openb_gap(rows: list[batch_openb.Row], floor: _openb_floor.Floor) -> str:
    """What stood (or stands) between ``default``'s high-class tail at 0.9 and the floor, in
    words (the cause was diagnosed on 2026-11-24 from the cycles' reasons and the cluster's
    state; the rule that answers it is batch/actions/slivers.py)."""
    ours = next(r for r in rows if r.policy == "default" and r.load == 0.9)
    p99, least = ours.delay["high"][1], floor.row.delay["high"][1]
    cause = (
        "a burst of 1-GPU high pods arriving together (around t = 18,500 s at load 0.9) when "
        "the GPUs not allocated are only slivers of shared GPUs: every tenant then holds a "
        "little less than its fair share, so reclaim (which takes only from a queue above its "
        "share) takes nothing, and preempt looks only in the pod's own queue while the other "
        "pods on a shared GPU belong to several tenants. Reclaim from shared GPUs "
        "(batch/actions/slivers.py, `default` only) answers it: a job within its fair share "
        "may take lower-priority preemptible jobs of any queue that hold only GPU shares, "
        "when the idle slivers add up to the GPUs it asks for (before it, this p99 was 128 s)"
    )
    if p99 < 60:
        return (
            f"the high class's p99 ({p99:,.0f} s; floor {least:,.0f} s) is under the 60 s "
            f"target here. Its tail was {cause}."
        )
    return (
        f"the high class's p99 is {p99:,.0f} s against a floor of {least:,.0f} s at this size: "
        f"the gap is policy, not the slice. Its tail was {cause}; what is left is not "
        "diagnosed."
    )


def controller_section(full: bool) -> str:
    sizes = (10_000, 1_000, 1_000, 200) if full else (2_000, 200, 200, 40)
    result = _batch_cycle.measure_batch(*sizes)
    return "\n".join(
        [
            "## One cycle of the live controller (benchmarks/controller_cycle.py --batch)",
            "",
            "SQLite store, sim backend; 8-GPU nodes, one preemptible 8-GPU job running per node, "
            "the pending jobs alike, spread evenly over the queues of 10 tenants. Quiet: median of "
            "5 cycles with nothing new (target < 100 ms), wall time and this thread's CPU time "
            "(the controller and SQLite; other load on the machine adds to the wall time only). "
            "Preemptor: the cycle after one 8-GPU job "
            "of priority class high arrives in a full queue (target < 1 s); the columns after it "
            "say whether that cycle preempted (tasks asked to stop) and the preemptor's phase.",
            "",
            _batch_cycle.table([result]),
        ]
    )


def splice(existing: str, sections: list[str]) -> str:
    """``existing`` with each section (from its ``## `` title to the next) replaced by the one
    of the same title in ``sections``; a section not there is added at the end."""
    parts = re.split(r"(?m)^(?=## )", existing)
    for section in sections:
        title = section.splitlines()[0]
        for i, part in enumerate(parts):
            if part.splitlines()[0] == title:
                parts[i] = section + "\n\n"
                break
        else:
            parts[-1] = parts[-1].rstrip("\n") + "\n\n"
            parts.append(section + "\n\n")
    return "".join(parts).rstrip("\n") + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--full",
        nargs="?",
        const="kueue,openb,controller",
        default="",
        help="full sizes for these sections (all when no list is given)",
    )
    parser.add_argument("--out", default=str(ROOT / "docs/results/scheduling.md"))
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/openb"))
    parser.add_argument(
        "--only", default="kueue,openb,controller", help="sections to run (comma-separated)"
    )
    args = parser.parse_args()
    command = "nice -n 10 .venv/bin/python benchmarks/scheduling_tables.py" + (
        f" --full {args.full}" if args.full else ""
    )
    full = set(args.full.split(",")) if args.full else set()
    started = time.perf_counter()
    sections = []
    wanted = args.only.split(",")
    if "kueue" in wanted:
        sections.append(kueue_section("kueue" in full))
        print(sections[-1], flush=True)
    if "openb" in wanted:
        sections.append(openb_section("openb" in full, Path(args.data)))
        print(sections[-1], flush=True)
    if "controller" in wanted:
        sections.append(controller_section("controller" in full))
        print(sections[-1], flush=True)
    header = [
        "# Batch scheduling: measured (issue 11)",
        "",
        f"Written by `{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC "
        f"({platform.machine()}, {platform.python_implementation()} {platform.python_version()}; "
        f"{time.perf_counter() - started:.0f} s in all). Regenerate with that command; "
        "wall times depend on the machine and on what else runs on it.",
        "",
    ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if set(wanted) < {"kueue", "openb", "controller"} and out.exists():
        stamp = (
            f"_This section: `{command} --only {args.only}` on "
            f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC._"
        )
        out.write_text(splice(out.read_text(), [f"{s}\n\n{stamp}" for s in sections]))
    else:
        out.write_text("\n".join(header) + "\n" + "\n\n".join(sections) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
