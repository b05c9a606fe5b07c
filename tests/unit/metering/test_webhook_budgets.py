"""Budgets end to end in one process with a real HTTP receiver: each threshold crossing is
delivered, signed, exactly once (also after a controller restart), a first 500 is retried with
backoff, and the actions stop admission or lower the queue's priority until a new period."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from aipaas.api.finops import ADMISSION_STOPPED, PRIORITY_LOWERED, Budget, WebhookDelivery
from aipaas.api.queue import Queue
from aipaas.api.tenancy import Role
from aipaas.clock import VirtualClock
from aipaas.controller.budgets import BudgetExtension
from aipaas.controller.extensions import CycleContext
from aipaas.metering.metrics import Metrics
from aipaas.metering.webhooks import DELIVERY_HEADER, private_target, verify
from aipaas.server.service import ObjectService
from aipaas.store import Store
from aipaas.store.ledger import ATTEMPT, LedgerEntry, insert_entries
from aipaas.tenancy.principal import Principal

SECRET = "s3cret-signing-key"
START = datetime(2026, 3, 10, 0, tzinfo=UTC)
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
kind: PriceList
metadata: {name: standard}
spec: {validFrom: 2026-01-01, gpu: [{model: H100, pricePerHour: 10}]}
---
apiVersion: aipaas/v1
kind: Secret
metadata: {name: hooks, tenant: acme}
spec: {data: {signing: SECRET}}
---
apiVersion: aipaas/v1
kind: Budget
metadata: {name: research-monthly, tenant: acme}
spec:
  queue: research
  amount: 100
  thresholds: [50, {percent: 80, action: lowerPriority}, {percent: 100, action: stopAdmission}]
  webhook: {url: URL, secretRef: {name: hooks, key: signing}}
""".replace("SECRET", SECRET)


class Receiver:
    """An HTTP server that answers 500 to the first ``failures`` requests, then 200."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.accepted: list[tuple[dict[str, str], bytes]] = []
        self.refused = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if outer.refused < outer.failures:
                    outer.refused += 1
                    self.send_response(500)
                else:
                    outer.accepted.append((dict(self.headers.items()), body))
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver(failures=1)
    yield made
    made.close()


@pytest.fixture
def store(tmp_path: Path, receiver: Receiver) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}", clock=VirtualClock(START))
    admin = ObjectService(opened, Principal("admin", "", Role.PLATFORM_ADMIN))
    admin.apply_text(SETUP.replace("URL", receiver.url))
    yield opened
    opened.close()


def context(store: Store, cycle: int = 0) -> CycleContext:
    clock = store.clock
    assert isinstance(clock, VirtualClock)
    return CycleContext(
        store=store,
        backend=None,  # type: ignore[arg-type]  # budgets never touch a backend
        clock=clock,
        metrics=Metrics(),
        nodes=(),
        transaction=store.transaction,
        cycle=cycle,
    )


def spend(store: Store, job: str, gpu_hours: float) -> None:
    """An attempt of ``gpu_hours`` H100-hours (10 per hour) that ended now."""
    end = store.clock.now()
    start = end - timedelta(hours=gpu_hours)
    with store.transaction() as tx:
        insert_entries(
            tx,
            [
                LedgerEntry(
                    kind=ATTEMPT,
                    tenant="acme",
                    queue="research",
                    user="alice",
                    job_name=job,
                    job_uid=f"uid-{job}",
                    task="w-0",
                    attempt=0,
                    gpu_model="H100",
                    gpu_milli=1000,
                    cpu_milli=0,
                    memory_mib=0,
                    started_at=start,
                    ended_at=end,
                    gpu_hours=gpu_hours,
                    cpu_hours=0,
                    memory_gib_hours=0,
                    recorded_by="controller",
                    recorded_at=end,
                    attempt_key=f"uid-{job}/w-0/0",
                )
            ],
        )


def cycles(store: Store, extension: BudgetExtension, count: int, step: float = 5.0) -> None:
    clock = store.clock
    assert isinstance(clock, VirtualClock)
    for index in range(count):
        extension.run(context(store, index))
        extension.courier.wait()  # the sends are off the cycle: their outcome is the next's
        clock.advance(step)


def thresholds(receiver: Receiver) -> list[float]:
    return [json.loads(body)["threshold"] for _, body in receiver.accepted]


def test_each_crossing_is_delivered_signed_once_and_a_500_is_retried(
    store: Store, receiver: Receiver
) -> None:
    extension = BudgetExtension(interval=1.0, allow_private=True)
    spend(store, "a", 6)  # 60 of 100: the 50% threshold
    cycles(store, extension, 4)
    assert receiver.refused == 1  # the first answer was 500 ...
    assert thresholds(receiver) == [50]  # ... and the retry got through, once
    headers, body = receiver.accepted[0]
    assert verify(SECRET.encode(), headers, body)
    assert not verify(b"another key", headers, body)
    document = json.loads(body)
    assert (document["budget"], document["spent"], document["period"]) == (
        "research-monthly",
        60,
        "2026-03",
    )
    spend(store, "b", 5)  # 110 of 100: 80% and 100% crossed at once
    cycles(store, extension, 4)
    assert sorted(thresholds(receiver)) == [50, 80, 100]
    assert len({h[DELIVERY_HEADER] for h, _ in receiver.accepted}) == 3
    # A restarted controller (a new extension, nothing in memory) sends nothing again.
    cycles(store, BudgetExtension(interval=1.0, allow_private=True), 6)
    assert sorted(thresholds(receiver)) == [50, 80, 100]
    log = [d for d in store.list_objects("WebhookDelivery", "acme")]
    assert all(isinstance(d, WebhookDelivery) and d.status for d in log)
    assert (
        sorted(d.status.phase for d in log if isinstance(d, WebhookDelivery) and d.status)
        == ["Delivered"] * 3
    )
    events = [
        e.reason for e in store.list_events(tenant="acme", kind="Budget", name="research-monthly")
    ]
    assert events.count("BudgetThresholdCrossed") == 3


def test_actions_hold_admission_and_lower_priority_until_a_new_period(store: Store) -> None:
    extension = BudgetExtension(interval=1.0, allow_private=True)
    spend(store, "a", 11)
    cycles(store, extension, 2)
    queue = store.get("Queue", "acme", "research")
    assert isinstance(queue, Queue)
    assert queue.metadata.annotations[ADMISSION_STOPPED] == "research-monthly"
    assert queue.metadata.annotations[PRIORITY_LOWERED] == "research-monthly"
    budget = store.get("Budget", "acme", "research-monthly")
    assert isinstance(budget, Budget) and budget.status is not None
    assert budget.status.crossed == [50, 80, 100]
    assert budget.status.spent == pytest.approx(110)
    clock = store.clock
    assert isinstance(clock, VirtualClock)
    clock.advance((datetime(2026, 4, 1, 1, tzinfo=UTC) - clock.now()).total_seconds())
    cycles(store, extension, 2)
    queue = store.get("Queue", "acme", "research")
    assert ADMISSION_STOPPED not in queue.metadata.annotations
    assert PRIORITY_LOWERED not in queue.metadata.annotations
    budget = store.get("Budget", "acme", "research-monthly")
    assert isinstance(budget, Budget) and budget.status is not None
    assert (budget.status.crossed, budget.status.spent) == ([], 0)


def test_the_forecast_follows_the_burn_rate(store: Store) -> None:
    clock = store.clock
    assert isinstance(clock, VirtualClock)
    clock.advance(9 * 86400)  # March 10th, 00:00 + 9 days: 18 days into the month
    spend(store, "a", 3)  # 30 spent in 18.0 days of 31
    BudgetExtension(interval=1.0, allow_private=True).run(context(store))
    budget = store.get("Budget", "acme", "research-monthly")
    assert isinstance(budget, Budget) and budget.status is not None
    assert budget.status.forecast == pytest.approx(30 * 31 / 18, rel=1e-6)


def test_users_cannot_lift_a_budget_hold(store: Store) -> None:
    spend(store, "a", 11)
    cycles(store, BudgetExtension(interval=1.0, allow_private=True), 2)
    tad = ObjectService(store, Principal("tad", "acme", Role.TENANT_ADMIN))
    queue = store.get("Queue", "acme", "research")
    wire = queue.to_wire()
    wire["metadata"]["annotations"] = {}
    tad.apply_text(json.dumps(wire))  # an apply without the annotation keeps it
    assert ADMISSION_STOPPED in store.get("Queue", "acme", "research").metadata.annotations
    wire["metadata"]["annotations"] = {ADMISSION_STOPPED: ""}
    with pytest.raises(Exception, match="set by the platform"):
        tad.apply_text(json.dumps(wire))


def test_a_tenants_webhook_to_an_internal_address_is_refused(
    store: Store, receiver: Receiver
) -> None:
    spend(store, "a", 6)
    cycles(store, BudgetExtension(interval=1.0), 3)  # private addresses not allowed
    assert receiver.accepted == [] and receiver.refused == 0  # nothing reached it
    delivery = store.list_objects("WebhookDelivery", "acme")[0]
    assert isinstance(delivery, WebhookDelivery) and delivery.status is not None
    assert delivery.status.phase == "Pending"  # retried later, in case the name moves
    assert "127.0.0.1 is not a public address" in (delivery.status.last_error or "")


@pytest.mark.parametrize(
    "url",
    ["http://169.254.169.254/latest", "http://10.0.0.8/x", "http://[::1]:80/", "http://localhost/"],
)
def test_internal_addresses_are_not_public(url: str) -> None:
    assert private_target(url) is not None
