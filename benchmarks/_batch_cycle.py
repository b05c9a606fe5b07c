"""One cycle of the live controller in a large, full cluster (issue 11), for controller_cycle.py.

The store (SQLite in a temporary folder) holds 10 tenants with ``queues`` queues between them,
``running`` preemptible 8-GPU jobs (priority normal) that run on a sim cluster of ``nodes``
8-GPU nodes, and ``pending`` more 8-GPU jobs of the same priority that wait: every queue has the
same demand and holds the same share, so a cycle with nothing new has nothing to decide. The
cycles run as the server runs them (``Controller.run_cycle``); their wall time is measured.
Then one 8-GPU job of priority high arrives in the first queue: it can start only by preempting
a job of its queue; the next cycle is timed, and what it did is read back from the store.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from aipaas.api.tenancy import Role
from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import SystemClock
from aipaas.controller.cycle import Controller
from aipaas.server.service import ObjectService
from aipaas.store import Store, TaskRepository
from aipaas.tenancy.principal import Principal

TENANTS = 10
QUIET_CYCLES = 5
DURATION = "1000000"  # simulated seconds: nothing ends during the benchmark


@dataclass
class BatchResult:
    nodes: int
    queues: int
    running: int
    pending: int
    #: jobs the store showed Running before the pending ones arrived
    running_seen: int
    setup_seconds: float
    quiet_ms: list[float]
    #: the same cycles' CPU time of this thread (controller and SQLite): what other load on
    #: the machine does not add to
    quiet_cpu_ms: list[float]
    preempt_ms: float
    #: that cycle's CPU time of this thread
    preempt_cpu_ms: float
    preemptor_phase: str
    stopping_tasks: int
    #: the machine's load average over the last minute, when the measurement ended
    load: float


def measure_batch(
    pending: int, running: int, nodes: int, queues: int, profile_to: str | None = None
) -> BatchResult:
    """The measurement of the module docstring; with ``profile_to``, the quiet cycles and the
    preemptor's cycle are profiled (cProfile), written there and summed up on stdout."""
    folder = Path(tempfile.mkdtemp(prefix="aipaas-batch-cycle-"))
    store = Store.open(f"sqlite:///{folder / 'aipaas.db'}")
    try:
        set_up = time.perf_counter()
        service = ObjectService(store, Principal("admin", "", Role.PLATFORM_ADMIN))
        service.apply_text(_tree(queues))
        cluster = folder / "cluster.yaml"
        cluster.write_text(
            f"nodes:\n  - {{name: n, count: {nodes}, cpu: 64, memory: 512Gi, "
            "gpus: {count: 8, model: H100, memory: 80Gi}}\n"
        )
        clock = SystemClock()
        backend = SimBackend(folder / "run", load_cluster(cluster), clock)
        controller = Controller(store, backend, log_dir=folder / "logs", clock=clock)
        _apply_jobs(service, "r", running, queues)
        running_seen = 0
        for _ in range(50):  # until every running job runs (admission, then the backend)
            controller.run_cycle()
            running_seen = store.count_by_phase("Job").get("Running", 0)
            if running_seen >= running:
                break
        _apply_jobs(service, "p", pending, queues)
        controller.run_cycle()  # the first look at the pending jobs (they explain why they wait)
        setup_seconds = time.perf_counter() - set_up
        profiler = cProfile.Profile() if profile_to else None
        if profiler is not None:
            profiler.enable()
        quiet, quiet_cpu = [], []
        for _ in range(QUIET_CYCLES):
            started, cpu = time.perf_counter(), time.thread_time()
            controller.run_cycle()
            quiet.append(1000 * (time.perf_counter() - started))
            quiet_cpu.append(1000 * (time.thread_time() - cpu))
        service.apply_text(_job("urgent", 0, queues, "priorityClassName: high"))
        started, cpu = time.perf_counter(), time.thread_time()
        controller.run_cycle()
        preempt_ms = 1000 * (time.perf_counter() - started)
        preempt_cpu_ms = 1000 * (time.thread_time() - cpu)
        if profiler is not None and profile_to:
            profiler.disable()
            profiler.dump_stats(profile_to)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        urgent = store.get("Job", "t0", "urgent")
        stopping = sum(
            1
            for records in TaskRepository(store).of_jobs_not_in([]).values()
            for r in records
            if r.stopping
        )
        return BatchResult(
            nodes,
            queues,
            running,
            pending,
            running_seen,
            setup_seconds,
            quiet,
            quiet_cpu,
            preempt_ms,
            preempt_cpu_ms,
            str(getattr(getattr(urgent, "status", None), "phase", "?")),
            stopping,
            os.getloadavg()[0],
        )
    finally:
        store.close()


def _tree(queues: int) -> str:
    docs = [
        f"apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {{name: t{t}}}\n"
        "spec: {quota: {gpu: 100000, cpu: 1000000, memory: 10000Ti}}\n"
        for t in range(TENANTS)
    ]
    docs += [
        f"apiVersion: aipaas/v1\nkind: Queue\nmetadata: {{name: q{q}, tenant: t{q % TENANTS}}}\n"
        for q in range(queues)
    ]
    return "---\n".join(docs)


def _job(name: str, index: int, queues: int, extra: str = "preemptible: true") -> str:
    queue = index % queues
    return (
        f"apiVersion: aipaas/v1\nkind: Job\nmetadata: {{name: {name}, tenant: t{queue % TENANTS}, "
        f"annotations: {{sim.aipaas.dev/duration: '{DURATION}'}}}}\n"
        f"spec:\n  queue: q{queue}\n  {extra}\n"
        "  tasks: [{name: w, command: [train], resources: {gpu: 8, cpu: 8, memory: 64Gi}}]\n"
    )


def _apply_jobs(service: ObjectService, prefix: str, count: int, queues: int) -> None:
    for first in range(0, count, 500):
        end = min(count, first + 500)
        service.apply_text("---\n".join(_job(f"{prefix}{i}", i, queues) for i in range(first, end)))


def table(results: list[BatchResult]) -> str:
    lines = [
        "| nodes | queues | running | pending | setup s | quiet cycle median ms | quiet min-max ms "
        "| quiet CPU median ms | cycle with a preemptor ms | its CPU ms | preemptor phase after "
        "| tasks asked to stop | load average |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.nodes:,} | {r.queues} | {r.running_seen:,} of {r.running:,} | {r.pending:,} "
            f"| {r.setup_seconds:.0f} "
            f"| {statistics.median(r.quiet_ms):.0f} | {min(r.quiet_ms):.0f}-{max(r.quiet_ms):.0f} "
            f"| {statistics.median(r.quiet_cpu_ms):.0f} | {r.preempt_ms:.0f} "
            f"| {r.preempt_cpu_ms:.0f} | {r.preemptor_phase} | {r.stopping_tasks} | {r.load:.1f} |"
        )
    return "\n".join(lines)
