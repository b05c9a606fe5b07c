"""Signed webhooks with retries and a durable delivery log.

A notification is a WebhookDelivery object (api/finops.py), created in the transaction that
decides it (a budget's crossing is entered with the budget's new status): its name is derived
from what it notifies, so it is entered once, whatever restarts happen. ``deliver_due`` sends
every pending delivery whose time has come; a 2xx answer marks it Delivered and it is never
sent again; anything else is retried with exponential backoff (2 s, 4 s, 8 s... at most 10
minutes apart) until ``MAX_ATTEMPTS``, then marked Failed.

Signature (as GitHub's and Stripe's): ``X-Aipaas-Signature: sha256=HEX`` where HEX is
HMAC-SHA256 of ``TIMESTAMP.BODY`` under the secret, ``X-Aipaas-Timestamp: TIMESTAMP`` (Unix
seconds) and ``X-Aipaas-Delivery: NAME`` (a receiver may drop a delivery it has seen: a crash
between the answer and the write of Delivered sends it once more).

A tenant's webhook goes to public addresses only, resolved once and pinned for the send
(metering/webhook_targets.py: DNS rebinding), and every send ends by a total deadline.

The controller sends with a ``Courier`` (controller/budgets.py, every cycle): each send on a
thread of its own, its outcome written by a later cycle, so no receiver, however slow, holds
the controller's loop (and with it every tenant's scheduling). ``deliver_due`` sends and
waits, for one-off use and tests.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Protocol

import httpx

from aipaas.api.finops import WebhookDelivery, WebhookDeliveryStatus
from aipaas.clock import isoformat
from aipaas.errors import Conflict
from aipaas.metering.webhook_targets import (
    DEADLINE_SECONDS,
    NotPublic,
    public_address,
    send,
    send_pinned,
)
from aipaas.metering.webhook_targets import private_target as private_target  # re-exported
from aipaas.store import Connection, Store
from aipaas.store.types import as_utc

log = logging.getLogger("aipaas.metering.webhooks")

MAX_ATTEMPTS: Final = 10
FIRST_BACKOFF_SECONDS: Final = 2.0
MAX_BACKOFF_SECONDS: Final = 600.0
#: at most this many sends per call, or under way at once (a long backlog waits its turn)
BATCH: Final = 20
#: at most this many of one tenant's sends under way at once (controller's Courier)
PER_TENANT: Final = 2
SIGNATURE_HEADER: Final = "X-Aipaas-Signature"
TIMESTAMP_HEADER: Final = "X-Aipaas-Timestamp"
DELIVERY_HEADER: Final = "X-Aipaas-Delivery"
EVENT_HEADER: Final = "X-Aipaas-Event"


class Sender(Protocol):
    """POSTs ``body`` to ``url`` and returns the HTTP status code (raises on a failure to
    connect). ``address``, when given, is the checked address to connect to: the url's host
    must not be resolved again (it is still the Host header and the TLS server name)."""

    def __call__(
        self, url: str, body: bytes, headers: dict[str, str], address: str | None = None
    ) -> int: ...


#: a delivery -> its signing key (None: it cannot be signed now)
Keys = Callable[[WebhookDelivery], bytes | None]
Transaction = Callable[[], AbstractContextManager[Connection]]


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify(secret: bytes, headers: dict[str, str], body: bytes) -> bool:
    """What a receiver does (the tests use it): recompute and compare in constant time."""
    wanted = sign(secret, int(headers[TIMESTAMP_HEADER]), body)
    return hmac.compare_digest(wanted, headers[SIGNATURE_HEADER])


def backoff(attempts: int) -> float:
    """Seconds to wait after the ``attempts``-th failure."""
    return float(min(FIRST_BACKOFF_SECONDS * 2 ** max(attempts - 1, 0), MAX_BACKOFF_SECONDS))


def http_sender(url: str, body: bytes, headers: dict[str, str], address: str | None = None) -> int:
    if address is not None:
        return send_pinned(url, address, body, headers)
    return send(url, body, headers)


def body_of(delivery: WebhookDelivery) -> bytes:
    document = {
        "event": delivery.spec.event,
        "delivery": delivery.name,
        "tenant": delivery.tenant,
        "source": delivery.spec.source,
        **delivery.spec.payload,
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def due(delivery: WebhookDelivery, now: datetime) -> bool:
    status = delivery.status or WebhookDeliveryStatus()
    if status.phase != "Pending":
        return False
    if status.next_attempt_at is None:
        return True
    return as_utc(datetime.fromisoformat(status.next_attempt_at.replace("Z", "+00:00"))) <= now


def due_deliveries(store: Store, now: datetime) -> list[WebhookDelivery]:
    listed = store.list_objects("WebhookDelivery", None, phases=["", "Pending"])
    return [d for d in listed if isinstance(d, WebhookDelivery) and due(d, now)]


def deliver_due(
    store: Store,
    keys: Keys,
    sender: Sender = http_sender,
    transaction: Transaction | None = None,
    *,
    allow_private: bool = False,
) -> int:
    """Send the pending deliveries whose time has come, one after another, and wait for each;
    returns how many were delivered. ``transaction``: where their new status is written (the
    controller's fenced one). ``allow_private``: tenants' webhooks may go to internal
    addresses (tests, closed sites); the operator's own alert URL always may. The controller
    sends with a ``Courier`` instead (never waiting for a receiver)."""
    now = as_utc(store.clock.now())
    delivered = 0
    for delivery in due_deliveries(store, now)[:BATCH]:
        public_only = not allow_private and delivery.spec.secret_ref is not None
        outcome = attempt(delivery, keys(delivery), sender, now, public_only)
        delivered += record(store, delivery, outcome, now, transaction or store.transaction)
    return delivered


@dataclass(frozen=True)
class Outcome:
    """What one send came to: the receiver's status code, or why there is none."""

    code: int | None = None
    error: str | None = None


def attempt(
    delivery: WebhookDelivery,
    secret: bytes | None,
    sender: Sender,
    now: datetime,
    public_only: bool = False,
) -> Outcome:
    """Resolve, check, sign and send one delivery (the network part: no store here)."""
    address: str | None = None
    if public_only:
        try:
            address = public_address(delivery.spec.url)  # resolved once; the send keeps it
        except NotPublic as err:
            return Outcome(error=f"refused: {err}")
    if secret is None:
        return Outcome(error="the signing key is missing (secretRef names no Secret key)")
    body = body_of(delivery)
    stamp = int(now.timestamp())
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(secret, stamp, body),
        TIMESTAMP_HEADER: str(stamp),
        DELIVERY_HEADER: delivery.name,
        EVENT_HEADER: delivery.spec.event,
    }
    started = time.monotonic()
    try:
        code = sender(delivery.spec.url, body, headers, address)
    except httpx.TimeoutException as err:
        if time.monotonic() - started >= DEADLINE_SECONDS * 0.99:
            return Outcome(error=f"no complete answer within the {DEADLINE_SECONDS:g} s deadline")
        return Outcome(error=f"{type(err).__name__}: {err}")
    except (httpx.HTTPError, OSError) as err:
        return Outcome(error=f"{type(err).__name__}: {err}")
    return Outcome(code, None if 200 <= code < 300 else f"answered {code}")


def record(
    store: Store,
    delivery: WebhookDelivery,
    outcome: Outcome,
    now: datetime,
    transaction: Transaction,
) -> int:
    """The delivery's new status after ``outcome``; 1 when it is now Delivered."""
    status = delivery.status or WebhookDeliveryStatus()
    attempts = status.attempts + 1
    code, error = outcome.code, outcome.error
    if error is None:
        new = WebhookDeliveryStatus(
            phase="Delivered", attempts=attempts, last_code=code, delivered_at=isoformat(now)
        )
    elif attempts >= MAX_ATTEMPTS:
        new = WebhookDeliveryStatus(
            phase="Failed", attempts=attempts, last_code=code, last_error=error
        )
    else:
        later = now + timedelta(seconds=backoff(attempts))
        new = WebhookDeliveryStatus(
            phase="Pending",
            attempts=attempts,
            last_code=code,
            last_error=error,
            next_attempt_at=isoformat(later),
        )
    try:
        with transaction() as tx:
            store.update_status(
                delivery, new, expected_version=delivery.metadata.resource_version, conn=tx
            )
            if new.phase == "Failed":
                message = f"{attempts} attempts: {error}"
                store.record_event(delivery, "WebhookFailed", message, warning=True, conn=tx)
    except Conflict:
        log.warning("webhook delivery %s changed while it was sent", delivery.name)
    return int(new.phase == "Delivered")


class Courier:
    """The controller's sender: each due delivery is sent on a thread of its own and the
    controller's cycle never waits for a receiver. A cycle (``run``) writes the outcomes of
    the sends that ended since the last one (in the cycle's fenced transaction) and starts
    the sends now due that are not under way, at most ``BATCH`` under way in all and
    ``PER_TENANT`` of one tenant (one tenant's slow receivers do not hold everyone's
    deliveries back). Each send ends by its total deadline (metering/webhook_targets.py), so
    a thread never outlives it by much. Called by controller/budgets.py every cycle."""

    def __init__(self, per_tenant: int = PER_TENANT, limit: int = BATCH) -> None:
        self.per_tenant = per_tenant
        self.limit = limit
        #: (tenant, name) -> the delivery as it was sent, and its send's outcome to come
        self._under_way: dict[tuple[str, str], tuple[WebhookDelivery, Future[Outcome]]] = {}

    def run(
        self,
        store: Store,
        keys: Keys,
        sender: Sender,
        transaction: Transaction,
        *,
        allow_private: bool = False,
    ) -> int:
        """Record what ended, start what is due; returns how many were recorded Delivered."""
        delivered = 0
        for key, (delivery, future) in list(self._under_way.items()):
            if future.done():
                del self._under_way[key]
                now = as_utc(store.clock.now())
                delivered += record(store, delivery, _outcome_of(future), now, transaction)
        now = as_utc(store.clock.now())
        for delivery in due_deliveries(store, now):
            key = (delivery.tenant, delivery.name)
            if len(self._under_way) >= self.limit:
                break
            if key in self._under_way or self._tenant_count(delivery.tenant) >= self.per_tenant:
                continue
            public_only = not allow_private and delivery.spec.secret_ref is not None
            started = self._start(delivery, keys(delivery), sender, now, public_only)
            self._under_way[key] = (delivery, started)
        return delivered

    def wait(self, timeout: float = DEADLINE_SECONDS + 5) -> None:
        """Until every send under way has ended (tests; a cycle never waits)."""
        futures.wait([future for _, future in self._under_way.values()], timeout=timeout)

    def _tenant_count(self, tenant: str) -> int:
        return sum(1 for key in self._under_way if key[0] == tenant)

    @staticmethod
    def _start(
        delivery: WebhookDelivery,
        secret: bytes | None,
        sender: Sender,
        now: datetime,
        public_only: bool,
    ) -> Future[Outcome]:
        future: Future[Outcome] = Future()

        def send() -> None:
            try:
                future.set_result(attempt(delivery, secret, sender, now, public_only))
            except BaseException as err:  # an unexpected bug: recorded as the attempt's error
                future.set_exception(err)

        # A daemon: a server that stops does not wait for a receiver (the delivery stays
        # Pending and is sent again by the next controller).
        threading.Thread(target=send, name=f"webhook {delivery.name}", daemon=True).start()
        return future


def _outcome_of(future: Future[Outcome]) -> Outcome:
    error = future.exception()
    if error is not None:
        log.error("sending a webhook failed unexpectedly", exc_info=error)
        return Outcome(error=f"{type(error).__name__}: {error}")
    return future.result()
