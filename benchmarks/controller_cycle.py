"""The controller's cost per job over a job's whole life, in one process, without the API;
and (``--batch``) one cycle of the batch scheduler in a large, full cluster.

    .venv/bin/python benchmarks/controller_cycle.py [--jobs 2000] [--db sqlite,postgresql]
        [--repeat 1]
    .venv/bin/python benchmarks/controller_cycle.py --batch [--pending 10000] [--running 1000]
        [--nodes 1000] [--queues 200]

``--batch`` (issue 11): ``--nodes`` sim nodes of 8 GPUs, ``--running`` 8-GPU jobs running (one
per node, preemptible, priority normal) and ``--pending`` more of the same waiting, spread evenly
over ``--queues`` queues of 10 tenants (so every queue holds its fair share and nothing may be
reclaimed); then the median of 5 cycles with nothing new, and the cycle after one 8-GPU job of
priority high arrives in a full queue (it may start only by preempting). Targets: under 100 ms
and under 1 s. The batch part lives in _batch_cycle.py.

Stores ``--jobs`` one-task jobs (sim backend, each runs 4 simulated seconds on the real clock),
then runs controller cycles as the server does (one right after another while jobs are placed,
then every 0.2 s) until every job has succeeded, and prints the controller's CPU per job (this
thread's, from the OS), PostgreSQL's CPU per job (its processes', from /proc), the cycles it
took and the wall time. Unlike the load benchmark it leaves out the API and the clients, whose
share of two cores varies from run to run, so it shows what a change to the controller or the
store costs the controller itself.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _measure import usable_databases
from aipaas.api.tenancy import Role
from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import SystemClock
from aipaas.controller.cycle import Controller
from aipaas.server.service import ObjectService
from aipaas.store import Store
from aipaas.store.pgtest import ThrowawayPostgres
from aipaas.tenancy.principal import Principal

DURATION_SECONDS = 4.0
PERIOD_SECONDS = 0.2
SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
spec: {quota: {gpu: 100000, cpu: 100000, memory: 100000Ti}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
"""


@dataclass
class Result:
    database: str
    controller_us: float
    postgresql_us: float
    cycles: int
    wall_seconds: float


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--db", default="sqlite,postgresql")
    parser.add_argument("--repeat", type=int, default=1, help="runs per database, interleaved")
    parser.add_argument("--batch", action="store_true", help="the batch cycle of issue 11")
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=1_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--queues", type=int, default=200)
    parser.add_argument("--cprofile", help="--batch: profile the measured cycles into this file")
    args = parser.parse_args()
    if args.batch:
        from _batch_cycle import measure_batch, table

        result = measure_batch(args.pending, args.running, args.nodes, args.queues, args.cprofile)
        print(table([result]))
        return
    databases = usable_databases(args.db)
    results = [run(db, args.jobs) for _ in range(args.repeat) for db in databases]
    print(f"\n{args.jobs} one-task jobs, each {DURATION_SECONDS:g} simulated seconds")
    print(
        f"{'database':<12}{'controller CPU us/job':>23}{'PostgreSQL CPU us/job':>23}"
        f"{'cycles':>8}{'wall s':>8}"
    )
    for r in results:
        print(
            f"{r.database:<12}{r.controller_us:>23.0f}{r.postgresql_us:>23.0f}"
            f"{r.cycles:>8}{r.wall_seconds:>8.1f}"
        )
    for db in databases:
        spent = [r.controller_us for r in results if r.database == db]
        print(f"{db}: median {statistics.median(spent):.0f} us of controller CPU per job")


def run(db: str, jobs: int) -> Result:
    data = Path(tempfile.mkdtemp(prefix="aipaas-cycle-"))
    postgres = ThrowawayPostgres() if db == "postgresql" else None
    url = postgres.start() if postgres else f"sqlite:///{data / 'aipaas.db'}"
    store = Store.open(url)
    try:
        service = ObjectService(store, Principal("admin", "", Role.PLATFORM_ADMIN))
        service.apply_text(SETUP)
        for first in range(0, jobs, 500):
            service.apply_text(_jobs(first, min(jobs, first + 500)))
        clock = SystemClock()
        backend = SimBackend(data / "run", load_cluster(), clock)
        controller = Controller(store, backend, log_dir=data / "logs", clock=clock)
        cpu, postgresql, started = time.thread_time(), _postgresql_cpu(), time.monotonic()
        cycles = 0
        while store.count_by_phase("Job").get("Succeeded", 0) < jobs:
            cycle_started = time.monotonic()
            controller.run_cycle()
            cycles += 1
            time.sleep(max(0.0, PERIOD_SECONDS - (time.monotonic() - cycle_started)))
        return Result(
            db,
            1e6 * (time.thread_time() - cpu) / jobs,
            1e6 * (_postgresql_cpu() - postgresql) / jobs if postgres else 0.0,
            cycles,
            time.monotonic() - started,
        )
    finally:
        store.close()
        if postgres is not None:
            postgres.stop()


def _jobs(first: int, end: int) -> str:
    return "".join(
        f"---\napiVersion: aipaas/v1\nkind: Job\nmetadata: {{name: j{i}, tenant: acme, "
        f"annotations: {{sim.aipaas.dev/duration: '{DURATION_SECONDS:g}'}}}}\n"
        "spec:\n  queue: research\n"
        "  tasks: [{name: w, command: [train], resources: {cpu: 100m, memory: 64Mi}}]\n"
        for i in range(first, end)
    )


def _postgresql_cpu() -> float:
    """CPU seconds (user + system) of every PostgreSQL process so far, read from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_path.read_text()
        except OSError:
            continue
        if stat[stat.index("(") + 1 : stat.rindex(")")].startswith("postgres"):
            fields = stat[stat.rindex(")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


if __name__ == "__main__":
    main()
