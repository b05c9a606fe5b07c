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
from _engines_run import Figures, Server, aipaas_burst, aipaas_latency

GANGS = (1, 8)


def measure(
    backend: str, engine: LocalEngine | SlurmEngine | RayEngine, jobs: int, repeats: int
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
            ours.rate, ours.burst_cpu = aipaas_burst(server, jobs)
        finally:
            server.stop()
    engine.latency(max(GANGS))  # warm
    for gang in GANGS:
        alone.latency[gang] = _median([engine.latency(gang) for _ in range(repeats)])
    alone.rate = engine.burst(jobs)
    return ours, alone


def _median(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def table(results: dict[str, tuple[Figures, Figures]], names: dict[str, str]) -> str:
    lines = [
        "| backend | who | 1 task: to Running | 1 task: to done | 8 tasks: to Running "
        "| 8 tasks: to done | jobs/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for backend, (ours, alone) in results.items():
        for who, figures in (("aipaas", ours), (names[backend], alone)):
            cells = [
                f"{figures.latency[g][0]:.2f} s | {figures.latency[g][1]:.2f} s" for g in GANGS
            ]
            lines.append(f"| {backend} | {who} | {' | '.join(cells)} | {figures.rate:.1f} |")
        added = [ours.latency[g][0] - alone.latency[g][0] for g in GANGS]
        share = ours.rate / alone.rate if alone.rate else 0.0
        lines.append(
            f"| {backend} | added | {added[0]:+.2f} s | | {added[1]:+.2f} s | | "
            f"{share:.0%} of the engine's |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="local,slurm,ray")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("docs/results/engines.md"))
    args = parser.parse_args()
    makers: dict[str, tuple[Callable[[], LocalEngine | SlurmEngine | RayEngine], str]] = {
        "local": (LocalEngine, "processes"),
        "slurm": (SlurmEngine, "sbatch"),
        "ray": (RayEngine, "ray.remote"),
    }
    results: dict[str, tuple[Figures, Figures]] = {}
    for backend in args.backends.split(","):
        make, _ = makers[backend]
        engine = make()
        try:
            results[backend] = measure(backend, engine, args.jobs, args.repeats)
        finally:
            engine.close()
        print(f"{backend}: done", file=sys.stderr, flush=True)
    text = table(results, {name: who for name, (_, who) in makers.items()})
    print(text)
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
