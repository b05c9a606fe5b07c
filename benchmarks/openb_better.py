"""fgd beside ours (fgdx, alias best) on the given openb workloads and our variants.

    .venv/bin/python benchmarks/openb_better.py [--data ../shared/data/openb] [--seeds 42-51]
        [--jobs 2] [--variants build/openb-variants] [--workloads default,x-gpuspec35,...]

Only the two policies, so it is the quick check; benchmarks/openb_fidelity.py prints the same
table after the fidelity table and writes both to docs/results/openb-fidelity.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    from aipaas.sim.better import GIVEN, better_rows, better_table
    from aipaas.sim.variants import VARIANTS

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/openb"))
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--variants", default=str(ROOT / "build/openb-variants"))
    parser.add_argument("--workloads", default="", help="comma-separated; default: all")
    args = parser.parse_args()
    low, high = (int(x) for x in args.seeds.split("-"))
    seeds = list(range(low, high + 1))
    wanted = set(args.workloads.split(",")) if args.workloads else None
    given = [w for w in GIVEN if wanted is None or w in wanted]
    variants = [v for v in VARIANTS if wanted is None or v.name in wanted]
    done = 0

    def tick(_: object) -> None:
        nonlocal done
        done += 1
        print(f"\r{done} runs", end="", file=sys.stderr, flush=True)

    rows = better_rows(args.data, args.variants, seeds, args.jobs, tick, given, variants)
    print(file=sys.stderr)
    print("\n".join(better_table(rows, seeds)))
    sys.exit(1 if any(r.gain < 0 for r in rows) else 0)


if __name__ == "__main__":
    main()
