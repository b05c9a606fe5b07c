"""Prometheus exposition. The collectors live on a registry the process builds once and shares
with the controller (which sets the gauges and observes scheduling latency).

With several API processes (``--workers``), whichever holds the controller lease sets them, and
a scrape may reach any process: the server then sets ``PROMETHEUS_MULTIPROC_DIR`` before the
workers start, prometheus-client keeps every value in files there, and ``exposition`` reads them
all. Gauges report the most recent value set by any process; each is set whole every cycle
(never cleared and counted up, which files would not forget).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest, multiprocess

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.jobs = Gauge(
            "aipaas_jobs",
            "Jobs by phase",
            ["phase"],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self.pending = Gauge(
            "aipaas_queue_pending_jobs",
            "Pending jobs per queue",
            ["tenant", "queue"],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self.gpus_allocated = Gauge(
            "aipaas_gpus_allocated",
            "GPUs allocated to tasks (fractions count)",
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self.gpus_total = Gauge(
            "aipaas_gpus_total",
            "GPUs known on all nodes",
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self._pending_seen: set[tuple[str, str]] = set()
        self.scheduling_latency = Histogram(
            "aipaas_scheduling_latency_seconds",
            "From submission to the whole gang placed",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800),
            registry=self.registry,
        )
        self.cycle_seconds = Histogram(
            "aipaas_controller_cycle_seconds",
            "Duration of one controller cycle",
            registry=self.registry,
        )

    def set_pending(self, pending: Iterable[tuple[str, str]]) -> None:
        """Pending jobs per (tenant, queue), given one pair per pending job; a queue that had
        pending jobs and has none now reads 0."""
        counts: dict[tuple[str, str], int] = {}
        for key in pending:
            counts[key] = counts.get(key, 0) + 1
        for tenant, queue in self._pending_seen | counts.keys():
            self.pending.labels(tenant=tenant, queue=queue).set(counts.get((tenant, queue), 0))
        self._pending_seen |= counts.keys()

    def exposition(self) -> bytes:
        """The text a scrape gets: this process's registry, or every process's values."""
        directory = os.environ.get(MULTIPROCESS_ENV)
        if not directory:
            return bytes(generate_latest(self.registry))
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
        return bytes(generate_latest(registry))


def prepare_multiprocess(directory: Path) -> None:
    """Before worker processes start: an empty directory for their values, named in the
    environment they inherit (a previous run's files would add stale counts)."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()
    os.environ[MULTIPROCESS_ENV] = str(directory)
