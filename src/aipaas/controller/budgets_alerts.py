"""Step 6, platform alerts: jobs pending longer than a bound, GPUs allocated but unused (when
the backend can tell: backends/gpu_utilization.py), nodes that stop being ready (and recover).

Each alert is an event on the object it is about (its tenant sees its own jobs' alerts) and,
when the operator set ``alert_webhook_url``, a signed WebhookDelivery kept outside every tenant
(the operator's URL is not the tenants' business). The events are the alerts' memory: a job is
alerted once per reason, a node once per change of state, across restarts of the controller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from aipaas.api.finops import WebhookDelivery, WebhookDeliverySpec
from aipaas.api.job import Job, JobPhase
from aipaas.api.meta import Object, ObjectMeta
from aipaas.api.node import Node
from aipaas.backends.gpu_utilization import gpu_utilization_of
from aipaas.controller.extensions import CycleContext
from aipaas.settings import Settings
from aipaas.store import Connection, Store, TaskRepository
from aipaas.store.types import as_utc

PENDING_TOO_LONG = "PendingTooLong"
GPUS_IDLE = "GpusIdle"
NODE_UNHEALTHY = "NodeUnhealthy"
NODE_RECOVERED = "NodeRecovered"
#: below this utilisation (percent) an allocated GPU counts as unused
IDLE_PERCENT = 5.0


def alerts_extension(settings: Settings) -> AlertExtension:
    return AlertExtension(
        interval=settings.budget_interval_seconds,
        pending_seconds=settings.alert_pending_seconds,
        idle_seconds=settings.alert_idle_gpu_seconds,
        webhook_url=settings.alert_webhook_url,
    )


class AlertExtension:
    name = "alerts"

    def __init__(
        self,
        interval: float = 30.0,
        pending_seconds: float = 3600.0,
        idle_seconds: float = 1800.0,
        webhook_url: str | None = None,
    ) -> None:
        self.interval = interval
        self.pending_seconds = pending_seconds
        self.idle_seconds = idle_seconds
        self.webhook_url = webhook_url
        self._last: float | None = None
        #: (job uid, task) -> when its GPUs were first seen unused (in this process)
        self._idle_since: dict[tuple[str, str], datetime] = {}

    def run(self, context: CycleContext) -> None:
        now = context.clock.monotonic()
        if self._last is not None and now - self._last < self.interval:
            return
        self._last = now
        moment = as_utc(context.clock.now())
        self.pending(context, moment)
        self.nodes(context)
        measured = gpu_utilization_of(context.backend)
        if measured is not None:
            self.idle(context, measured.gpu_utilization(), moment)

    def pending(self, context: CycleContext, now: datetime) -> None:
        store = context.store
        waiting = [
            job
            for job in store.list_objects("Job", None, phases=["", JobPhase.PENDING.value])
            if isinstance(job, Job) and _age(job, now) > self.pending_seconds
        ]
        seen = _alerted(store, PENDING_TOO_LONG, [j.metadata.uid or "" for j in waiting])
        for job in waiting:
            if job.metadata.uid in seen:
                continue
            reason = job.status.reason if job.status else ""
            message = f"pending for {_age(job, now) / 60:.0f} minutes ({reason or 'waiting'})"
            self._alert(context, job, PENDING_TOO_LONG, message, {"queue": job.spec.queue})

    def nodes(self, context: CycleContext) -> None:
        store = context.store
        nodes = [n for n in store.list_objects("Node", "") if isinstance(n, Node)]
        last = _last_node_alerts(store, [n.name for n in nodes])
        for node in nodes:
            ready = node.status.ready if node.status is not None else True
            was = last.get(node.name, NODE_RECOVERED)
            if not ready and was != NODE_UNHEALTHY:
                self._alert(context, node, NODE_UNHEALTHY, "the node is not ready", {})
            elif ready and was == NODE_UNHEALTHY:
                self._alert(context, node, NODE_RECOVERED, "the node is ready again", {})

    def idle(
        self, context: CycleContext, usage: Mapping[tuple[str, int], float], now: datetime
    ) -> None:
        store = context.store
        running = [
            r for r in TaskRepository(store).active() if r.phase == "Running" and r.gpus and r.node
        ]
        busy: set[tuple[str, str]] = set()
        idle_jobs: dict[str, tuple[str, str, list[str]]] = {}
        for record in running:
            key = (record.job_uid, record.name)
            known = [usage.get((record.node or "", gpu)) for gpu in record.gpus]
            if any(u is None or u >= IDLE_PERCENT for u in known):
                busy.add(key)
                continue
            since = self._idle_since.setdefault(key, now)
            if (now - since).total_seconds() >= self.idle_seconds:
                tenant, name, tasks = idle_jobs.setdefault(
                    record.job_uid, (record.tenant, record.job_name, [])
                )
                tasks.append(record.name)
        for key in [k for k in self._idle_since if k in busy]:
            del self._idle_since[key]
        seen = _alerted(store, GPUS_IDLE, list(idle_jobs))
        for uid, (tenant, name, tasks) in idle_jobs.items():
            job = store.find("Job", tenant, name)
            if uid in seen or not isinstance(job, Job) or job.metadata.uid != uid:
                continue
            minutes = self.idle_seconds / 60
            message = f"GPUs of {', '.join(sorted(tasks))} unused for {minutes:.0f} minutes"
            self._alert(context, job, GPUS_IDLE, message, {"tasks": sorted(tasks)})

    def _alert(
        self,
        context: CycleContext,
        obj: Object,
        reason: str,
        message: str,
        extra: dict[str, object],
    ) -> None:
        store = context.store
        with context.transaction() as tx:
            store.record_event(obj, reason, message, warning=reason != NODE_RECOVERED, conn=tx)
            if self.webhook_url:
                _enter(store, tx, self.webhook_url, obj, reason, message, extra)


def _enter(
    store: Store,
    tx: Connection,
    url: str,
    obj: Object,
    reason: str,
    message: str,
    extra: dict[str, object],
) -> None:
    stamp = int(store.clock.now().timestamp() * 1000)
    name = f"alert-{reason.lower()}-{stamp}-{(obj.metadata.uid or obj.name)[:8]}"
    delivery = WebhookDelivery(
        metadata=ObjectMeta(name=name[:63].rstrip("-")),
        spec=WebhookDeliverySpec(
            url=url,
            event=reason,
            source=f"{obj.kind.lower()}/{obj.name}",
            payload={"tenant": obj.tenant, "message": message, **extra},
        ),
    )
    store.create(delivery, conn=tx)


def _age(job: Job, now: datetime) -> float:
    created = job.metadata.creation_timestamp
    if not created:
        return 0.0
    return (now - as_utc(datetime.fromisoformat(created.replace("Z", "+00:00")))).total_seconds()


def _alerted(store: Store, reason: str, uids: Iterable[str]) -> set[str]:
    """The uids among ``uids`` that have had an event of ``reason``."""
    return store.events.uids_with_reason(reason, uids)


def _last_node_alerts(store: Store, names: Iterable[str]) -> dict[str, str]:
    """Each node's latest NodeUnhealthy or NodeRecovered event reason."""
    return store.events.latest_reasons("Node", names, [NODE_UNHEALTHY, NODE_RECOVERED])
