"""Speed and memory of one full openb replay (default workload, tune 1.3), per policy.

    .venv/bin/python benchmarks/openb_replay.py [--data ../shared/data/openb] [--policies fgd,...]

Each replay runs in a fresh process (peak RSS is its own); the time includes loading the CSVs.
The paper's simulator needs about 330 s for the fgd replay on this kind of machine with its
per-event report removed (ARCHITECTURE/issue notes), over 25 minutes as published.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _measure import in_fresh_process

ROOT = Path(__file__).resolve().parents[1]


def replay_once(data: str, policy: str, seed: int) -> dict[str, Any]:
    from aipaas.sim.experiment import OpenbRun, run_openb
    from aipaas.sim.report import value_at

    started = time.perf_counter()
    result = run_openb(
        OpenbRun(
            f"{data}/openb_node_list_gpu_node.csv",
            f"{data}/openb_pod_list_default.csv",
            policy,
            seed,
            1.3,
        )
    )
    return {
        "policy": policy,
        "seconds": time.perf_counter() - started,
        "pods": result.pods_arrived,
        "alloc_100": value_at(result.curve, 100),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/openb"))
    parser.add_argument("--policies", default="random,dotprod,clustering,packing,bestfit,fgd,fgdx")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    print("| policy | pods | seconds (load + replay) | pods/s | alloc % at 100% | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for policy in args.policies.split(","):
        r = in_fresh_process(replay_once, args.data, policy, args.seed)
        print(
            f"| {policy} | {r['pods']:,} | {r['seconds']:.2f} | {r['pods'] / r['seconds']:,.0f} "
            f"| {r['alloc_100']:.2f} | {r['peak_rss_mib']:.0f} |"
        )


if __name__ == "__main__":
    main()
