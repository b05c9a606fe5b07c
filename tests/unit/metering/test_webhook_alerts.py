"""Platform alerts: a job pending too long, GPUs allocated but unused (a backend that can
tell), a node that stops being ready and recovers; each an event once, and a signed webhook to
the operator's URL (a real HTTP receiver), never seen by tenants."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path

import pytest

from aipaas.api.job import Job, JobPhase, JobStatus
from aipaas.api.meta import ObjectMeta
from aipaas.api.node import Node, NodeGpus, NodeSpec, NodeStatus
from aipaas.api.tenancy import Role
from aipaas.clock import VirtualClock
from aipaas.controller.budgets import BudgetExtension
from aipaas.controller.budgets_alerts import AlertExtension
from aipaas.controller.extensions import CycleContext
from aipaas.metering.metrics import Metrics
from aipaas.metering.webhooks import verify
from aipaas.server.service import ObjectService
from aipaas.store import Store, TaskRecord, TaskRepository
from aipaas.tenancy.principal import Principal
from tests.unit.metering.test_webhook_budgets import Receiver

KEY = b"operator-key"
START = datetime(2026, 3, 10, tzinfo=UTC)
SETUP = """
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
---
apiVersion: aipaas/v1
kind: Job
metadata: {name: waits, tenant: acme}
spec: {queue: research, tasks: [{name: w, command: [x], resources: {gpu: 64}}]}
---
apiVersion: aipaas/v1
kind: Job
metadata: {name: idles, tenant: acme}
spec: {queue: research, tasks: [{name: w, command: [x], resources: {gpu: 2}}]}
"""


class Backend:
    """A backend that tells how busy its GPUs are."""

    def __init__(self) -> None:
        self.usage: dict[tuple[str, int], float] = {("dgx", 0): 0.0, ("dgx", 1): 0.0}

    def gpu_utilization(self) -> Mapping[tuple[str, int], float]:
        return self.usage


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver(failures=0)
    yield made
    made.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}", clock=VirtualClock(START))
    ObjectService(opened, Principal("admin", "", Role.PLATFORM_ADMIN)).apply_text(SETUP)
    opened.create(
        Node(
            metadata=ObjectMeta(name="dgx"),
            spec=NodeSpec(backend="sim", cpu="64", memory="1Ti", gpus=NodeGpus(count=8)),
            status=NodeStatus(ready=True),
        )
    )
    idles = opened.update_status(
        opened.get("Job", "acme", "idles"), JobStatus(phase=JobPhase.RUNNING)
    )
    TaskRepository(opened).insert_many(
        [
            TaskRecord(
                job_uid=idles.metadata.uid or "",
                tenant="acme",
                job_name="idles",
                name="w-0",
                group_name="w",
                index=0,
                rank=0,
                node="dgx",
                gpus=(0, 1),
                gpu_milli=1000,
                phase="Running",
                started_at=START,
            )
        ]
    )
    yield opened
    opened.close()


def run(store: Store, backend: Backend, alerts: AlertExtension, minutes: float) -> None:
    clock = store.clock
    assert isinstance(clock, VirtualClock)
    context = CycleContext(
        store=store,
        backend=backend,  # type: ignore[arg-type]  # only its GPU utilisation is read
        clock=clock,
        metrics=Metrics(),
        nodes=(),
        transaction=store.transaction,
        cycle=0,
    )
    deliveries = BudgetExtension(interval=3600, platform_key=KEY)
    for _ in range(int(minutes)):
        alerts.run(context)
        deliveries.run(context)
        deliveries.courier.wait()  # sent off the cycle: recorded by the next one
        clock.advance(60)


def reasons(store: Store, kind: str, name: str) -> list[str]:
    return [e.reason for e in store.list_events(kind=kind, name=name)]


def set_ready(store: Store, ready: bool) -> None:
    node = store.get("Node", "", "dgx")
    store.update_status(node, NodeStatus(ready=ready))


def test_pending_idle_and_unhealthy_are_alerted_once_each(store: Store, receiver: Receiver) -> None:
    backend = Backend()
    alerts = AlertExtension(
        interval=30, pending_seconds=600, idle_seconds=300, webhook_url=receiver.url
    )
    run(store, backend, alerts, 4)
    assert receiver.accepted == []  # nothing yet: 4 minutes of both
    run(store, backend, alerts, 20)
    assert reasons(store, "Job", "waits").count("PendingTooLong") == 1
    assert reasons(store, "Job", "idles").count("GpusIdle") == 1
    set_ready(store, False)
    run(store, backend, alerts, 3)
    set_ready(store, True)
    run(store, backend, alerts, 3)
    assert [r for r in reasons(store, "Node", "dgx") if r.startswith("Node")] == [
        "NodeUnhealthy",
        "NodeRecovered",
    ]
    # A restarted controller (new extensions) alerts nothing again.
    run(store, backend, AlertExtension(30, 600, 300, receiver.url), 30)
    events = sorted(json.loads(body)["event"] for _, body in receiver.accepted)
    assert events == ["GpusIdle", "NodeRecovered", "NodeUnhealthy", "PendingTooLong"]
    assert all(verify(KEY, headers, body) for headers, body in receiver.accepted)
    # The operator's deliveries belong to no tenant: acme's list of them is empty.
    assert store.list_objects("WebhookDelivery", "acme") == []


def test_busy_gpus_and_backends_that_cannot_tell_raise_no_idle_alert(store: Store) -> None:
    backend = Backend()
    backend.usage = {("dgx", 0): 90.0, ("dgx", 1): 0.0}  # one of the two busy
    run(store, backend, AlertExtension(30, 600, 300), 30)
    assert "GpusIdle" not in reasons(store, "Job", "idles")

    class Blind:
        pass

    run(store, Blind(), AlertExtension(30, 600, 300), 30)  # type: ignore[arg-type]
    assert "GpusIdle" not in reasons(store, "Job", "idles")


def test_a_job_that_starts_in_time_is_not_alerted(store: Store) -> None:
    job = store.get("Job", "acme", "waits")
    assert isinstance(job, Job)
    run(store, Backend(), AlertExtension(30, 3600, 300), 30)
    assert "PendingTooLong" not in reasons(store, "Job", "waits")
