"""Prometheus gauges of the services, set by the controller's services step each cycle:
replicas desired and ready, the load the autoscaler saw (requests in flight, per second), and
the requests the entry points hold (in flight, waiting for a replica: the queue).
A deleted service's series are set to zero (with several API processes the values live in
files that do not forget a series)."""

from __future__ import annotations

import weakref

from prometheus_client import CollectorRegistry, Gauge

from aipaas.autoscale.replicas import Load

_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, ServiceGauges] = (
    weakref.WeakKeyDictionary()
)


class ServiceGauges:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.replicas = Gauge(
            "aipaas_service_replicas",
            "Replicas of a service: desired, ready",
            ["tenant", "service", "state"],
            registry=registry,
            multiprocess_mode="mostrecent",
        )
        self.load = Gauge(
            "aipaas_service_load",
            "A service's load as its entry points measured it: concurrency, rate (per second)",
            ["tenant", "service", "metric"],
            registry=registry,
            multiprocess_mode="mostrecent",
        )

        self.requests = Gauge(
            "aipaas_service_requests",
            "Requests a service's entry points hold now: in_flight (all), waiting (for a ready "
            "replica)",
            ["tenant", "service", "state"],
            registry=registry,
            multiprocess_mode="mostrecent",
        )
        self.queue = Gauge(
            "aipaas_service_queue_length",
            "Requests queued at a service's entry points for a ready replica",
            ["tenant", "service"],
            registry=registry,
            multiprocess_mode="mostrecent",
        )

    def set(self, tenant: str, service: str, desired: int, ready: int, load: Load | None) -> None:
        self.replicas.labels(tenant, service, "desired").set(desired)
        self.replicas.labels(tenant, service, "ready").set(ready)
        self.load.labels(tenant, service, "concurrency").set(load.concurrency if load else 0.0)
        self.load.labels(tenant, service, "rate").set(load.rate if load else 0.0)
        self.requests.labels(tenant, service, "in_flight").set(load.in_flight if load else 0.0)
        self.requests.labels(tenant, service, "waiting").set(load.waiting if load else 0.0)
        self.queue.labels(tenant, service).set(load.waiting if load else 0.0)

    def gone(self, tenant: str, service: str) -> None:
        self.set(tenant, service, 0, 0, None)


def gauges(registry: CollectorRegistry) -> ServiceGauges:
    """The gauges on ``registry``, made once."""
    found = _BY_REGISTRY.get(registry)
    if found is None:
        found = _BY_REGISTRY[registry] = ServiceGauges(registry)
    return found
