"""Write our openb workload variants (src/aipaas/sim/variants.py) and show what each is made of.

    .venv/bin/python benchmarks/openb_variants.py [--data ../shared/data/openb]
        [--out build/openb-variants]

The files are made from the default trace with fixed seeds, so every run writes the same bytes;
they are not committed. Replay one under every policy with

    aipaas simulate openb --nodes DATA/openb_node_list_gpu_node.csv \
        --pods OUT/openb_pod_list_x-gpuspec35.csv --policy all
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    from aipaas.sim.better import GIVEN, NODES_CSV, variant_files
    from aipaas.sim.openb import load_nodes, load_pods
    from aipaas.sim.variants import VARIANTS, mix

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/openb"))
    parser.add_argument("--out", default=str(ROOT / "build/openb-variants"))
    args = parser.parse_args()
    files = variant_files(args.data, args.out)
    nodes = load_nodes(Path(args.data) / NODES_CSV)
    built = {v.name: v.describe() for v in VARIANTS}
    print(
        "| workload | built | pods | CPU-only | CPU cores | GPUs asked | sharing | multi-GPU "
        "| bound to models |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    paths = {w: Path(args.data) / f"openb_pod_list_{w}.csv" for w in GIVEN} | files
    for name, path in paths.items():
        m = mix(load_pods(path, nodes))
        print(
            f"| {name} | {built.get(name, 'given')} | {m['pods']:.0f} | {m['cpu_only_pods']:.0f} "
            f"| {m['cpu_cores']:.0f} | {m['gpus']:.0f} | {m['sharing_milli_share']:.0%} "
            f"| {m['multi_gpu_milli_share']:.0%} | {m['bound_pod_share']:.0%} |"
        )
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
