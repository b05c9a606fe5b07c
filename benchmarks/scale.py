"""Scale benchmark: a synthetic 5,000-node x 8-GPU cluster (mixed models) and 100,000 pods
drawn from the openb pod mix, placed one by one. Prints pods/s and peak memory per policy.

    .venv/bin/python benchmarks/scale.py [--pods-csv FILE] [--nodes 5000] [--pods 100000]

Each policy runs in a fresh process, so peak RSS is that policy's own.
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
SAMPLE = ROOT / "tests/data/openb"
MODELS = ("A100", "H100", "V100M32", "T4")


def place(policy: str, node_count: int, pod_count: int, pods_csv: str, seed: int) -> dict[str, Any]:
    import numpy as np

    from aipaas.scheduler.framework.cluster import ClusterState, NodeSpec
    from aipaas.scheduler.framework.runtime import Scheduler
    from aipaas.scheduler.framework.types import PodRequest, Unschedulable
    from aipaas.sim.openb import load_nodes, load_pods

    rng = np.random.default_rng(seed)
    nodes = [
        NodeSpec(f"node-{i:05d}", 128_000, 1_048_576, 8, MODELS[int(rng.integers(len(MODELS)))])
        for i in range(node_count)
    ]
    mix = load_pods(pods_csv, load_nodes(SAMPLE / "openb_node_list_sample.csv"))
    # The openb mix, without GPU-model constraints (the synthetic models differ from openb's).
    mix = [PodRequest(p.name, p.cpu_milli, p.memory_mib, p.gpu_count, p.gpu_milli) for p in mix]
    drawn = rng.integers(len(mix), size=pod_count)
    pods = [mix[i] for i in drawn.tolist()]
    state = ClusterState(nodes)
    scheduler = Scheduler(state, policy, seed, workload=mix)
    started = time.perf_counter()
    failed = 0
    for pod in pods:
        if isinstance(scheduler.schedule(pod), Unschedulable):
            failed += 1
    elapsed = time.perf_counter() - started
    return {
        "policy": policy,
        "seconds": elapsed,
        "pods_per_s": pod_count / elapsed,
        "failed": failed,
        "gpu_alloc_pct": 100 * state.allocated_gpu_milli / state.total_gpu_milli,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods-csv", default=str(SAMPLE / "openb_pod_list_sample.csv"))
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--policies", default="bestfit,fgd,fgdx")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rows = [
        in_fresh_process(place, policy, args.nodes, args.pods, args.pods_csv, args.seed)
        for policy in args.policies.split(",")
    ]
    print(f"{args.nodes} nodes x 8 GPUs ({', '.join(MODELS)}), {args.pods} pods from the openb mix")
    print()
    print("| policy | seconds | pods/s | failed pods | GPU alloc % | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['policy']} | {r['seconds']:.1f} | {r['pods_per_s']:,.0f} | {r['failed']:,} | "
            f"{r['gpu_alloc_pct']:.2f} | {r['peak_rss_mib']:.0f} |"
        )


if __name__ == "__main__":
    main()
