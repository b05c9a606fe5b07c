"""Step 6, FinOps series for Prometheus: per tenant and per queue, the GPUs allocated,
guaranteed, at fair share, pending and borrowed (from the status the controller wrote for each
Queue and Tenant), and what the running work costs per hour at the prices in force now.

Every ``interval`` seconds (the status it reads changes once a cycle; the cost rate reads the
running tasks and their jobs). The series are on the process's Metrics registry, served at
/metrics (metering/metrics.py).
"""

from __future__ import annotations

from collections import defaultdict

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from aipaas.api.queue import Queue
from aipaas.api.tenancy import Tenant
from aipaas.controller.extensions import CycleContext
from aipaas.metering.attribution import parse
from aipaas.metering.cost_ledger import price_book
from aipaas.metering.metrics import QUEUE_AMOUNTS
from aipaas.metering.prices import Rates, hourly
from aipaas.metering.usage import entries_of_running
from aipaas.settings import Settings


def metrics_extension(settings: Settings) -> FinOpsMetrics:
    return FinOpsMetrics(interval=min(settings.budget_interval_seconds, 5.0))


class FinOpsMetrics:
    name = "finops-metrics"

    def __init__(self, interval: float = 5.0) -> None:
        self.interval = interval
        self._last: float | None = None

    def run(self, context: CycleContext) -> None:
        now = context.clock.monotonic()
        if self._last is not None and now - self._last < self.interval:
            return
        self._last = now
        self.measure(context)

    def measure(self, context: CycleContext) -> None:
        store, metrics = context.store, context.metrics
        queues = [q for q in store.list_objects("Queue", None) if isinstance(q, Queue)]
        tenants = [t for t in store.list_objects("Tenant", "") if isinstance(t, Tenant)]
        for what in QUEUE_AMOUNTS:
            metrics.set_all(
                metrics.queue_gpus[what],
                {(q.tenant, q.name): _gpus(q.status, what) for q in queues},
            )
            metrics.set_all(
                metrics.tenant_gpus[what],
                {(t.name,): _gpus(t.status, what) for t in tenants},
            )
        book = price_book(store)
        moment = context.clock.now()
        by_queue: dict[tuple[str, ...], float] = defaultdict(float)
        by_tenant: dict[tuple[str, ...], float] = defaultdict(float)
        # the cycle's running tasks and jobs (their spec is what a cost rate reads), not read
        # again: thousands of them, every few seconds
        jobs = {job.metadata.uid or "": job for job in context.jobs.values()}
        for entry in entries_of_running(store, context.running, jobs):
            prices = book.at(entry.tenant, moment)
            if prices is None:
                continue
            pool, tier = parse(entry.reason)
            rate = hourly(
                prices,
                Rates(
                    entry.gpu_model, entry.gpu_milli, entry.cpu_milli, entry.memory_mib, pool, tier
                ),
            )
            currency = prices.spec.currency
            by_queue[(entry.tenant, entry.queue, currency)] += rate
            by_tenant[(entry.tenant, currency)] += rate
        metrics.set_all(metrics.queue_cost_rate, by_queue)
        metrics.set_all(metrics.tenant_cost_rate, by_tenant)


def _gpus(status: BaseModel | None, what: str) -> float:
    """GPUs of one amount of a Queue's typed status or a Tenant's lenient one (read as the
    wire has them: a lenient model keeps unknown blocks under their wire names)."""
    if status is None:
        return 0.0
    amounts = status.model_dump(mode="json", by_alias=True).get(to_camel(what))
    gpu = amounts.get("gpu") if isinstance(amounts, dict) else None
    return float(gpu) if isinstance(gpu, int | float) else 0.0
