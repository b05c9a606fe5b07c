"""Regenerates docs/results/scheduling.md: the batch-scheduling measurements of issue 11.

    .venv/bin/python benchmarks/scheduling_tables.py [--full [SECTIONS]] [--only SECTIONS]
        [--out docs/results/scheduling.md]

Runs, in this process and in order: the Kueue scalability scenario (kueue_scale.py; ``--full``
adds the 1,000-queue, 50,000-job variant), the openb time-based replay under fifo, volcano and
default at loads 0.7, 0.9 and 1.1 (batch_openb.py; quick size by default, ``--full`` all 8,152
pods on a 38-node slice), and one cycle of the live controller in a full cluster
(controller_cycle.py --batch; quick: 2,000 pending, 200 running on 200 nodes, 40 queues;
``--full``: 10,000 / 1,000 / 1,000 / 200). ``--full`` alone makes every section full size;
``--full kueue,controller`` only those (the full openb replay takes hours on two shared cores).
Each table is printed as it is made, then the file is written with the command that made it.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import _batch_cycle
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
        ]
    )


def openb_section(full: bool, data: Path) -> str:
    size = batch_openb.FULL if full else batch_openb.QUICK
    rows = batch_openb.run_all(
        data, size, [0.7, 0.9, 1.1], ["fifo", "volcano", "default"], 42, "random"
    )
    described = (
        "all 8,152 pods on every 32nd node (38 nodes, 193 GPUs)"
        if full
        else "a seeded quarter of the pods (2,009) on every 128th node (10 nodes, 49 GPUs)"
    )
    return "\n".join(
        [
            "## openb trace replayed in time (benchmarks/batch_openb.py)",
            "",
            f"Size: {described}. Arrivals in creation order compressed to the target load "
            "(offered GPU-time / (cluster GPUs x arrival span)), durations = deletion - creation "
            "capped at 4 h, QoS LS/Guaranteed -> priority 1000 not preemptible, Burstable -> 100, "
            "BE -> 0 (both preemptible), 4 tenants of equal weight (20% of the GPUs guaranteed "
            "each) with 2 queues each (seeded coin), timeLimit = duration rounded up to a minute. "
            "Times in trace seconds. Jain: per 1-hour window over tenants with work in it, mean "
            "over windows where at least two tenants had a job waiting (their count in brackets). "
            "Why each choice: the module's docstring.",
            "",
            batch_openb.table(rows),
            "",
            *(f"- {line}" for line in batch_openb.verdicts(rows)),
        ]
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
            "5 cycles with nothing new (target < 100 ms). Preemptor: the cycle after one 8-GPU job "
            "of priority class high arrives in a full queue (target < 1 s); the columns after it "
            "say whether that cycle preempted (tasks asked to stop) and the preemptor's phase.",
            "",
            _batch_cycle.table([result]),
        ]
    )


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
    out.write_text("\n".join(header) + "\n" + "\n\n".join(sections) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
