"""Data near compute in simulation (issue 13): GPU time waiting for data, start delays, bytes
read from the source and GPU allocation, for no cache; a cache without data-aware scheduling
(Fluid's default: filled on first read, placement blind to data); ours (data affinity in
placement and prefetch that follows the queue); with --peers, the same two with caches that
serve each other (a distributed cache, as Alluxio under Fluid is).

    nice -n 10 .venv/bin/python benchmarks/data_sim.py [--jobs 1200] [--seeds 42,43,44]
        [--ablations] [--peers] [--write-doc docs/data.md]

The trace (aipaas.data.sim_trace) and the data plane (aipaas.data.sim_model) are stated in
docs/data.md. With --write-doc the tables replace the part of the file between the markers
``<!-- data_sim:begin -->`` and ``<!-- data_sim:end -->``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from aipaas.data.sim_model import (
    AFFINITY_ONLY,
    CACHE_ONLY,
    CACHE_PEERS,
    NO_CACHE,
    OURS,
    OURS_PEERS,
    PREFETCH_ONLY,
    Policy,
    SimSettings,
)
from aipaas.data.sim_result import HEADER, SimResult
from aipaas.data.sim_run import DataSim
from aipaas.data.sim_trace import TraceConfig, make_trace

BEGIN = "<!-- data_sim:begin -->"
END = "<!-- data_sim:end -->"


def markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(results: dict[str, SimResult], base_policy: Policy, ours_policy: Policy) -> str:
    base, ours = results[base_policy.name], results[ours_policy.name]
    less = 100.0 * (1.0 - ours.wait_gpu_hours / base.wait_gpu_hours)
    lost = base.allocation_pct - ours.allocation_pct
    lost_busy = base.busy_allocation_pct - ours.busy_allocation_pct
    met = less >= 50.0 and lost <= 1.0 and lost_busy <= 1.0
    return (
        f"*{ours.policy}* against *{base.policy}*: {less:.0f}% less GPU time waiting for data "
        f"(target >= 50%); GPU allocation {_points(lost)}, {_points(lost_busy)} while jobs "
        f"wait (target: at most 1 lost). Target {'met' if met else 'NOT met'}."
    )


def _points(lost: float) -> str:
    return f"{'lost' if lost > 0 else 'gained'} {abs(lost):.1f} points"


def run_seed(jobs: int, seed: int, policies: list[Policy]) -> tuple[str, dict[str, SimResult]]:
    trace = make_trace(TraceConfig(seed=seed, jobs=jobs))
    results: dict[str, SimResult] = {}
    for policy in policies:
        started = time.perf_counter()
        results[policy.name] = DataSim(trace, policy, SimSettings()).run()
        print(
            f"seed {seed} {policy.name}: {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    span_h = max(job.submit_s for job in trace.jobs) / 3600
    title = f"Seed {seed}: {jobs} jobs arriving over {span_h:.0f} h on 32 nodes of 8 GPUs"
    table = markdown([result.row() for result in results.values()])
    verdicts = [verdict(results, CACHE_ONLY, OURS)]
    if CACHE_PEERS.name in results and OURS_PEERS.name in results:
        verdicts.append(verdict(results, CACHE_PEERS, OURS_PEERS))
    text = "\n\n".join(verdicts)
    return f"#### {title}\n\n{table}\n\n{text}\n", results


def write_doc(path: Path, text: str) -> None:
    content = path.read_text()
    if BEGIN not in content or END not in content:
        raise SystemExit(f"{path}: the markers {BEGIN} and {END} are missing")
    head, rest = content.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1200)
    parser.add_argument("--seeds", default="42")
    parser.add_argument("--ablations", action="store_true", help="also affinity or prefetch alone")
    parser.add_argument(
        "--peers", action="store_true", help="also caches that serve each other (distributed)"
    )
    parser.add_argument("--write-doc", type=Path, default=None)
    args = parser.parse_args()
    policies = [NO_CACHE, CACHE_ONLY, OURS]
    if args.ablations:
        policies += [AFFINITY_ONLY, PREFETCH_ONLY]
    if args.peers:
        policies += [CACHE_PEERS, OURS_PEERS]
    sections = []
    for seed in (int(s) for s in args.seeds.split(",")):
        section, _ = run_seed(args.jobs, seed, policies)
        print(section, flush=True)
        sections.append(section)
    command = "benchmarks/data_sim.py " + " ".join(sys.argv[1:])
    text = f"Printed by `{command.strip()}`.\n\n" + "\n".join(sections)
    if args.write_doc is not None:
        write_doc(args.write_doc, text.replace(f" --write-doc {args.write_doc}", ""))


if __name__ == "__main__":
    main()
