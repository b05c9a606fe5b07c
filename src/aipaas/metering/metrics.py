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
from collections.abc import Iterable, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest, multiprocess

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: the amounts of a queue's or tenant's status exported per queue and per tenant, in GPUs
QUEUE_AMOUNTS = ("allocated", "guaranteed", "fair_share", "pending", "borrowed")


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
        self.queue_scheduling_latency = Histogram(
            "aipaas_queue_scheduling_latency_seconds",
            "From submission to the whole gang placed, per tenant and queue",
            ["tenant", "queue"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800),
            registry=self.registry,
        )
        self.queue_gpus = {
            what: self._gauge(f"aipaas_queue_gpus_{what}", f"GPUs {what} per queue", "queue")
            for what in QUEUE_AMOUNTS
        }
        self.tenant_gpus = {
            what: self._gauge(f"aipaas_tenant_gpus_{what}", f"GPUs {what} per tenant", "tenant")
            for what in QUEUE_AMOUNTS
        }
        self.queue_cost_rate = Gauge(
            "aipaas_queue_cost_per_hour",
            "What the queue's running work costs per hour at today's prices",
            ["tenant", "queue", "currency"],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self.tenant_cost_rate = Gauge(
            "aipaas_tenant_cost_per_hour",
            "What the tenant's running work costs per hour at today's prices",
            ["tenant", "currency"],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self._seen: dict[int, set[tuple[str, ...]]] = {}
        self.cycle_seconds = Histogram(
            "aipaas_controller_cycle_seconds",
            "Duration of one controller cycle",
            registry=self.registry,
        )

    def _gauge(self, name: str, text: str, level: str) -> Gauge:
        labels = ["tenant", "queue"] if level == "queue" else ["tenant"]
        return Gauge(name, text, labels, registry=self.registry, multiprocess_mode="mostrecent")

    def observe_scheduling(self, tenant: str, queue: str, seconds: float) -> None:
        self.scheduling_latency.observe(seconds)
        self.queue_scheduling_latency.labels(tenant=tenant, queue=queue).observe(seconds)

    def set_all(self, gauge: Gauge, values: Mapping[tuple[str, ...], float]) -> None:
        """Set ``gauge`` for every label tuple of ``values``; a tuple set before and absent
        now reads 0 (a deleted queue, a tenant with nothing running)."""
        seen = self._seen.setdefault(id(gauge), set())
        for labels in seen - values.keys():
            gauge.labels(*labels).set(0)
        for labels, value in values.items():
            gauge.labels(*labels).set(value)
        seen |= values.keys()

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
