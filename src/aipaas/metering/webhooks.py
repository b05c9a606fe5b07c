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
(metering/webhook_targets.py: DNS rebinding).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Final, Protocol

import httpx
from sqlalchemy import Connection

from aipaas.api.finops import WebhookDelivery, WebhookDeliveryStatus
from aipaas.clock import isoformat
from aipaas.errors import Conflict
from aipaas.metering.cost import utc
from aipaas.metering.webhook_targets import TIMEOUT_SECONDS, NotPublic, public_address, send_pinned
from aipaas.metering.webhook_targets import private_target as private_target  # re-exported
from aipaas.store import Store

log = logging.getLogger("aipaas.metering.webhooks")

MAX_ATTEMPTS: Final = 10
FIRST_BACKOFF_SECONDS: Final = 2.0
MAX_BACKOFF_SECONDS: Final = 600.0
#: at most this many sends per call (a cycle is not held up by a long backlog)
BATCH: Final = 20
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
    answer = httpx.post(url, content=body, headers=headers, timeout=TIMEOUT_SECONDS)
    return answer.status_code


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
    return utc(datetime.fromisoformat(status.next_attempt_at.replace("Z", "+00:00"))) <= now


def deliver_due(
    store: Store,
    keys: Keys,
    sender: Sender = http_sender,
    transaction: Transaction | None = None,
    *,
    allow_private: bool = False,
) -> int:
    """Send the pending deliveries whose time has come; returns how many were delivered.
    ``transaction``: where their new status is written (the controller's fenced one).
    ``allow_private``: tenants' webhooks may go to internal addresses (tests, closed sites);
    the operator's own alert URL always may."""
    now = utc(store.clock.now())
    listed = store.list_objects("WebhookDelivery", None, phases=["", "Pending"])
    pending = [d for d in listed if isinstance(d, WebhookDelivery) and due(d, now)]
    delivered = 0
    for delivery in pending[:BATCH]:
        public_only = not allow_private and delivery.spec.secret_ref is not None
        delivered += _attempt(
            store, delivery, keys, sender, now, transaction or store.transaction, public_only
        )
    return delivered


def _attempt(
    store: Store,
    delivery: WebhookDelivery,
    keys: Keys,
    sender: Sender,
    now: datetime,
    transaction: Transaction,
    public_only: bool = False,
) -> int:
    status = delivery.status or WebhookDeliveryStatus()
    attempts = status.attempts + 1
    secret = keys(delivery)
    code: int | None = None
    error: str | None = None
    address: str | None = None
    refused: str | None = None
    if public_only:
        try:
            address = public_address(delivery.spec.url)  # resolved once; the send keeps it
        except NotPublic as err:
            refused = str(err)
    if refused is not None:
        error = f"refused: {refused}"
    elif secret is None:
        error = "the signing key is missing (secretRef names no Secret key)"
    else:
        body = body_of(delivery)
        stamp = int(now.timestamp())
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(secret, stamp, body),
            TIMESTAMP_HEADER: str(stamp),
            DELIVERY_HEADER: delivery.name,
            EVENT_HEADER: delivery.spec.event,
        }
        try:
            code = sender(delivery.spec.url, body, headers, address)
        except (httpx.HTTPError, OSError) as err:
            error = f"{type(err).__name__}: {err}"
        else:
            if not 200 <= code < 300:
                error = f"answered {code}"
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
