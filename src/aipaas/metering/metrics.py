"""Prometheus exposition. The collectors live on a registry the process builds once and shares
with the controller (which sets the gauges and observes scheduling latency)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.jobs = Gauge("aipaas_jobs", "Jobs by phase", ["phase"], registry=self.registry)
        self.pending = Gauge(
            "aipaas_queue_pending_jobs",
            "Pending jobs per queue",
            ["tenant", "queue"],
            registry=self.registry,
        )
        self.gpus_allocated = Gauge(
            "aipaas_gpus_allocated",
            "GPUs allocated to tasks (fractions count)",
            registry=self.registry,
        )
        self.gpus_total = Gauge(
            "aipaas_gpus_total", "GPUs known on all nodes", registry=self.registry
        )
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
        self.requests = Counter(
            "aipaas_api_requests",
            "API requests by method and status",
            ["method", "status"],
            registry=self.registry,
        )
