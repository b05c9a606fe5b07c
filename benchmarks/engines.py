"""What aipaas adds on top of the engines it drives (issue 12): per backend, the time from
submit to Running and from the task's end to Succeeded for a 1-task and an 8-task gang, and jobs
per second sustained for a burst of small jobs; beside the engine alone on the same cluster
(``sbatch``, ``ray.remote``; for the local backend, processes started by Python).

    nice -n 10 .venv/bin/python benchmarks/engines.py [--backends local,slurm,ray] [--jobs 500]
        [--out docs/results/engines.md]

Each backend gets a throwaway cluster on this host (scripts/slurm_cluster.sh with 4 nodes of
this machine's cores; Ray's cluster utilities, 2 nodes of 4 CPUs) and an ``aipaas server`` of
its own. Latencies: the median of ``--repeats`` runs after one to warm up, each task
printing the times it started and ended (``date``): "to Running" is when the API says Running
(aipaas) or squeue says RUNNING (sbatch) or the task started (Ray, which has no cheaper way to
see it), minus the submit; "to done" is when the API says Succeeded (aipaas), squeue COMPLETED
(sbatch) or ray.get returned, minus the task's own end. Throughput: ``--jobs`` one-task jobs
(`true`, 1 CPU) sent as fast as one client can, until all have succeeded: jobs per second from
the first submit to the last success. Helpers: benchmarks/_engines_run.py (the server, the
aipaas side), benchmarks/_engines_alone.py (the engines alone and their clusters).
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _engines_alone import LocalEngine, RayEngine, SlurmEngine
from _engines_run import (
    Figures,
    Server,
    aipaas_burst,
    aipaas_latency,
    cpu_by_name,
    cpu_by_process,
    machine_cpu,
)

GANGS = (1, 8)


def measure(
    backend: str,
    engine: LocalEngine | SlurmEngine | RayEngine,
    jobs: int,
    repeats: int,
    per_request: int,
) -> tuple[Figures, Figures]:
    """(aipaas's figures, the engine's) on one cluster."""
    ours = Figures()
    alone = Figures()
    # aipaas first, then the engine alone once aipaas's server is gone: the engine's own runs
    # must not share the cluster with aipaas's (Ray: the benchmark's own idle workers left in
    # Ray's pool made Ray start workers anew for aipaas's tasks, ~3.5 s more CPU in Ray's
    # workers and a third off aipaas's burst, measured).
    with tempfile.TemporaryDirectory(prefix="aipaas-bench-") as data:
        server = Server(Path(data), backend, engine.server_options()).start()
        try:
            server.setup()
            # warm: the first task of a cluster starts its workers (Ray) or caches (Slurm)
            aipaas_latency(server, max(GANGS), "warm")
            for gang in GANGS:
                runs = [aipaas_latency(server, gang, f"lat{gang}-{i}") for i in range(repeats)]
                ours.latency[gang] = _median(runs)
            processes = cpu_by_process()
            ours.rate, ours.burst_cpu, ours.machine_cpu = aipaas_burst(server, jobs, per_request)
            ours.by_name = cpu_by_name(processes)
        finally:
            server.stop()
    engine.latency(max(GANGS))  # warm
    for gang in GANGS:
        alone.latency[gang] = _median([engine.latency(gang) for _ in range(repeats)])
    machine_before, processes = machine_cpu(), cpu_by_process()
    alone.rate = engine.burst(jobs)
    alone.machine_cpu = machine_cpu() - machine_before
    alone.by_name = cpu_by_name(processes)
    return ours, alone


def _median(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def table(results: dict[str, tuple[Figures, Figures]], names: dict[str, str], jobs: int) -> str:
    """The latencies and the burst per backend; the burst's CPU per job is the machine's (every
    process) and, for aipaas, its own processes' part of it. With the cores busy, a burst can go
    no faster than the cores divided by the CPU each job costs ("CPU allows")."""
    cores = os.cpu_count() or 1
    lines = [
        "| backend | who | 1 task: to Running | 1 task: to done | 8 tasks: to Running "
        "| 8 tasks: to done | jobs/s | CPU per job: machine | of it aipaas's processes "
        "| jobs/s the CPU allows |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for backend, (ours, alone) in results.items():
        for who, figures in (("aipaas", ours), (names[backend], alone)):
            cells = [
                f"{figures.latency[g][0]:.2f} s | {figures.latency[g][1]:.2f} s" for g in GANGS
            ]
            per_job = figures.machine_cpu / jobs
            own = f"{1000 * figures.burst_cpu / jobs:.1f} ms" if figures is ours else ""
            allows = f"{cores / per_job:.0f}" if per_job else ""
            lines.append(
                f"| {backend} | {who} | {' | '.join(cells)} | {figures.rate:.1f} "
                f"| {1000 * per_job:.1f} ms | {own} | {allows} |"
            )
        added = [ours.latency[g][0] - alone.latency[g][0] for g in GANGS]
        share = ours.rate / alone.rate if alone.rate else 0.0
        extra = (ours.machine_cpu - alone.machine_cpu) / jobs
        lines.append(
            f"| {backend} | added | {added[0]:+.2f} s | | {added[1]:+.2f} s | | "
            f"{share:.0%} of the engine's | {1000 * extra:+.1f} ms | | |"
        )
    return "\n".join(lines)


def breakdown(results: dict[str, tuple[Figures, Figures]], names: dict[str, str], jobs: int) -> str:
    """Where each burst's CPU went: milliseconds per job by process name, largest first (the
    names above 0.1 ms per job on either side)."""
    lines = []
    for backend, (ours, alone) in results.items():
        lines += [
            "",
            f"| {backend}: process | aipaas ms/job | {names[backend]} ms/job |",
            "|---|---|---|",
        ]
        every = sorted(
            set(ours.by_name) | set(alone.by_name),
            key=lambda n: -max(ours.by_name.get(n, 0.0), alone.by_name.get(n, 0.0)),
        )
        for name in every:
            mine, theirs = (1000 * f.by_name.get(name, 0.0) / jobs for f in (ours, alone))
            if max(mine, theirs) >= 0.1:
                lines.append(f"| {name} | {mine:.1f} | {theirs:.1f} |")
        totals = (1000 * sum(f.by_name.values()) / jobs for f in (ours, alone))
        lines.append("| all | {:.1f} | {:.1f} |".format(*totals))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="local,slurm,ray")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--per-request", type=int, default=1, help="jobs sent in one apply during the burst"
    )
    parser.add_argument("--out", type=Path, default=Path("docs/results/engines.md"))
    parser.add_argument(
        "--ray-jobs",
        type=int,
        default=0,
        help="also send this many jobs through Ray's Job Submission API (needs ray[default])",
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="also print each burst's CPU by process name"
    )
    args = parser.parse_args()
    makers: dict[str, tuple[Callable[[], LocalEngine | SlurmEngine | RayEngine], str]] = {
        "local": (LocalEngine, "processes"),
        "slurm": (SlurmEngine, "sbatch"),
        "ray": (RayEngine, "ray.remote"),
    }
    names = {name: who for name, (_, who) in makers.items()}
    results: dict[str, tuple[Figures, Figures]] = {}
    jobs_api_rate: float | None = None
    for backend in args.backends.split(","):
        make, _ = makers[backend]
        engine = make()
        try:
            results[backend] = measure(backend, engine, args.jobs, args.repeats, args.per_request)
        finally:
            engine.close()
        if backend == "ray" and args.ray_jobs:
            # a cluster of its own: its dashboard (which the Job API needs) would load the
            # cluster the other rows are measured on
            jobs_engine = RayEngine(jobs_api=True)
            try:
                jobs_api_rate = jobs_engine.jobs_burst(args.ray_jobs)
            finally:
                jobs_engine.close()
        print(f"{backend}: done", file=sys.stderr, flush=True)
    text = table(results, names, args.jobs)
    print(text)
    if args.breakdown:
        print(breakdown(results, names, args.jobs))
    command = " ".join(["benchmarks/engines.py", *sys.argv[1:]])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    notes = {
        backend: (
            f"The {backend} rows: `nice -n 10 .venv/bin/python {command}`, {when}, load "
            f"average {load} at the end; aipaas's processes (the server and its children) used "
            f"{ours.burst_cpu:.1f} s of CPU for the {args.jobs}-job burst "
            f"({1000 * ours.burst_cpu / args.jobs:.0f} ms per job)."
        )
        for backend, (ours, _) in results.items()
    }
    if jobs_api_rate is not None:
        notes["ray"] += (
            f" Ray's own job path, its Job Submission API (a record, logs, status and stop per "
            f"job, as aipaas keeps), on a cluster of its own of the same shape: "
            f"{jobs_api_rate:.2f} jobs/s for {args.ray_jobs} `true` jobs."
        )
    for note in notes.values():
        print(note)
    if args.out:
        old = args.out.read_text() if args.out.exists() else ""
        args.out.write_text(merged(old, text, notes))


def merged(old: str, table_text: str, notes: dict[str, str]) -> str:
    """The results file with the measured backends' rows and notes replaced (or added), and
    the other backends' rows and notes kept as they were (each backend may be run apart)."""
    fresh = table_text.splitlines()
    lines = old.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("| backend |")), None)
    if start is None:
        head = "# Engines: what aipaas adds to Slurm and Ray (issue 12)"
        body = "\n\n".join(notes.values())
        return f"{head}\n\n{table_text}\n\n{body}\n"
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    rows = lines[start + 2 : end]
    for backend in notes:
        new_rows = [row for row in fresh[2:] if row.startswith(f"| {backend} |")]
        at = next((i for i, row in enumerate(rows) if row.startswith(f"| {backend} |")), None)
        rows = [row for row in rows if not row.startswith(f"| {backend} |")]
        rows[at if at is not None else len(rows) : 0] = new_rows
    after = lines[end:]
    for backend, note in notes.items():
        found = [i for i, line in enumerate(after) if line.startswith(f"The {backend} rows:")]
        if found:
            after[found[0]] = note
        else:
            after[0:0] = ["", note]
    return "\n".join([*lines[:start], *fresh[:2], *rows, *after]) + "\n"


if __name__ == "__main__":
    main()
