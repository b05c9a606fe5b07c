"""A webhook send has a total deadline, not only a timeout per read: a receiver that answers
one byte at a time (each within the read timeout) is given up at the deadline; and the
controller's Courier starts sends without waiting for any of them."""

from __future__ import annotations

import datetime as dt
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aipaas.api.finops import SecretRef, WebhookDelivery, WebhookDeliverySpec
from aipaas.api.meta import ObjectMeta
from aipaas.clock import VirtualClock
from aipaas.metering.webhook_targets import send, send_pinned
from aipaas.metering.webhooks import Courier
from aipaas.store import Store


class Drip:
    """Loopback: reads a request, then answers a byte every ``every`` seconds, endlessly."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(connection,), daemon=True).start()

    def _drip(self, connection: socket.socket) -> None:
        with connection:
            try:
                connection.recv(65536)
                while not self.stop.wait(self.every):
                    connection.sendall(b"H")
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@pytest.fixture
def drip() -> Iterator[Drip]:
    made = Drip(every=0.5)
    yield made
    made.close()


def test_a_pinned_send_to_a_slow_drip_receiver_ends_at_its_deadline(drip: Drip) -> None:
    started = time.monotonic()
    with pytest.raises(httpx.TimeoutException):
        send_pinned(f"http://hook.test:{drip.port}/h", "127.0.0.1", b"{}", {}, deadline=2)
    assert 1.9 < time.monotonic() - started < 4


def test_an_unpinned_send_to_a_slow_drip_receiver_ends_at_its_deadline(drip: Drip) -> None:
    started = time.monotonic()
    with pytest.raises(httpx.TimeoutException):
        send(f"http://127.0.0.1:{drip.port}/h", b"{}", {}, deadline=2)
    assert 1.9 < time.monotonic() - started < 4


def test_the_courier_does_not_wait_for_a_receiver(tmp_path: Path) -> None:
    store = Store.open(
        f"sqlite:///{tmp_path / 'aipaas.db'}",
        clock=VirtualClock(dt.datetime(2026, 3, 10, tzinfo=dt.UTC)),
    )
    try:
        for index in range(3):
            store.create(
                WebhookDelivery(
                    metadata=ObjectMeta(name=f"slow-{index}", tenant="acme"),
                    spec=WebhookDeliverySpec(
                        url="http://127.0.0.1:9/hook",
                        secret_ref=SecretRef(name="hooks", key="signing"),
                        event="budget.threshold",
                        source="Budget/research",
                    ),
                )
            )
        release = threading.Event()
        sent: list[str] = []

        def slow_sender(
            url: str, body: bytes, headers: dict[str, str], address: str | None = None
        ) -> int:
            sent.append(headers["X-Aipaas-Delivery"])
            release.wait(30)
            return 200

        courier = Courier(per_tenant=2)
        started = time.monotonic()
        courier.run(store, lambda _d: b"key", slow_sender, store.transaction, allow_private=True)
        assert time.monotonic() - started < 1.0  # the cycle went on
        time.sleep(0.2)
        assert len(sent) == 2  # one tenant has at most two under way
        courier.run(store, lambda _d: b"key", slow_sender, store.transaction, allow_private=True)
        assert len(sent) == 2  # nothing sent twice while under way
        release.set()
        courier.wait()
        delivered = courier.run(
            store, lambda _d: b"key", slow_sender, store.transaction, allow_private=True
        )
        assert delivered == 2
        courier.wait()
        assert sorted(sent) == ["slow-0", "slow-1", "slow-2"]
    finally:
        store.close()
