"""A tenant's webhook under DNS rebinding: the name is resolved once, every address checked,
and the signed POST connects to that checked address (or is not sent), never to what a second
lookup answers; the Host header and the TLS server name stay the URL's host."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from aipaas.api.finops import SecretRef, WebhookDelivery, WebhookDeliverySpec
from aipaas.api.meta import ObjectMeta
from aipaas.clock import VirtualClock
from aipaas.metering.webhook_targets import send_pinned
from aipaas.metering.webhooks import deliver_due, http_sender
from aipaas.store import Store

PUBLIC = "93.184.215.14"  # a global address: the check lets it through
START = dt.datetime(2026, 3, 10, tzinfo=dt.UTC)


@dataclass
class Receiver:
    """A loopback HTTP(S) server keeping each POST's headers and the TLS server name."""

    tls: ssl.SSLContext | None = None
    accepted: list[dict[str, str]] = field(default_factory=list)
    server_names: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                outer.accepted.append(dict(self.headers.items()))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if self.tls is not None:
            self.tls.sni_callback = lambda _sock, name, _ctx: self.server_names.append(name)
            self.server.socket = self.tls.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}", clock=VirtualClock(START))
    yield opened
    opened.close()


@dataclass
class Network:
    """A resolver and connector the test controls: ``answers[host]`` gives each lookup's
    addresses in turn (the last one repeats); connects to PUBLIC are recorded and refused."""

    answers: dict[str, list[list[str]]]
    lookups: list[str] = field(default_factory=list)
    connects: list[tuple[str, int]] = field(default_factory=list)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_lookup: Callable[..., Any] = socket.getaddrinfo
        real_connect: Callable[..., socket.socket] = socket.create_connection

        def lookup(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            if host not in self.answers:
                return real_lookup(host, port, *args, **kwargs)
            self.lookups.append(host)
            turns = self.answers[host]
            addresses = turns[min(len(self.lookups) - 1, len(turns) - 1)]
            return [
                (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (a, int(port)))
                for a in addresses
            ]

        def connect(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
            self.connects.append(address)
            if address[0] == PUBLIC:  # no route out of a test machine: say so at once
                raise ConnectionRefusedError(f"{PUBLIC} refused (test network)")
            return real_connect(address, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", lookup)
        monkeypatch.setattr(socket, "create_connection", connect)


def enter_delivery(store: Store, url: str) -> None:
    store.create(
        WebhookDelivery(
            metadata=ObjectMeta(name="budget-crossed-50", tenant="acme"),
            spec=WebhookDeliverySpec(
                url=url,
                secret_ref=SecretRef(name="hooks", key="signing"),
                event="budget.threshold",
                source="Budget/research",
            ),
        )
    )


def the_delivery(store: Store) -> WebhookDelivery:
    found = store.get("WebhookDelivery", "acme", "budget-crossed-50")
    assert isinstance(found, WebhookDelivery) and found.status is not None
    return found


def test_a_rebinding_name_is_sent_to_the_checked_address_only(
    store: Store, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """First lookup: a public address; every later one: the loopback receiver. Resolving the
    name again at send time would post the signed body into the platform's own network."""
    network = Network({"hook.rebind.test": [[PUBLIC], ["127.0.0.1"]]})
    network.install(monkeypatch)
    enter_delivery(store, f"http://hook.rebind.test:{receiver.port}/hook")
    assert deliver_due(store, lambda _d: b"key", http_sender) == 0
    assert receiver.accepted == []  # nothing reached the internal address
    assert network.lookups == ["hook.rebind.test"]  # resolved once
    assert network.connects == [(PUBLIC, receiver.port)]  # and sent to what was checked
    status = the_delivery(store).status
    assert status is not None and status.phase == "Pending"
    assert "refused (test network)" in (status.last_error or "")


def test_a_name_with_any_internal_address_is_not_sent_at_all(
    store: Store, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    network = Network({"hook.mixed.test": [[PUBLIC, "169.254.169.254"]]})
    network.install(monkeypatch)
    enter_delivery(store, f"http://hook.mixed.test:{receiver.port}/hook")
    assert deliver_due(store, lambda _d: b"key", http_sender) == 0
    assert network.connects == [] and receiver.accepted == []
    status = the_delivery(store).status
    assert status is not None
    assert "hook.mixed.test is not a public address" in (status.last_error or "")
    assert "169.254" not in (status.last_error or "")  # what it resolves to is not said


def test_with_private_addresses_allowed_an_ordinary_delivery_arrives(
    store: Store, receiver: Receiver
) -> None:
    enter_delivery(store, f"http://127.0.0.1:{receiver.port}/hook")
    assert deliver_due(store, lambda _d: b"key", http_sender, allow_private=True) == 1
    assert [h["X-Aipaas-Delivery"] for h in receiver.accepted] == ["budget-crossed-50"]
    assert the_delivery(store).status.phase == "Delivered"  # type: ignore[union-attr]


def test_the_pinned_send_does_not_resolve_and_keeps_the_host_header(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    network = Network({"hook.pinned.test": [["10.9.9.9"]]})  # a lookup would go elsewhere
    network.install(monkeypatch)
    url = f"http://hook.pinned.test:{receiver.port}/hook"
    assert http_sender(url, b"{}", {"X-Test": "1"}, "127.0.0.1") == 200
    assert network.lookups == []
    assert [h["Host"] for h in receiver.accepted] == [f"hook.pinned.test:{receiver.port}"]


def self_signed(name: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem, key_pem


def test_https_to_the_pinned_address_names_the_host_for_sni_and_the_certificate(
    tmp_path: Path,
) -> None:
    pem, key_pem = self_signed("hook.tls.test")
    (tmp_path / "cert.pem").write_bytes(pem)
    (tmp_path / "key.pem").write_bytes(key_pem)
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    trusting = ssl.create_default_context(cadata=pem.decode())
    receiver = Receiver(tls=server_side)
    try:
        url = f"https://hook.tls.test:{receiver.port}/hook"
        assert send_pinned(url, "127.0.0.1", b"{}", {}, verify=trusting) == 200
        assert receiver.server_names == ["hook.tls.test"]
        assert [h["Host"] for h in receiver.accepted] == [f"hook.tls.test:{receiver.port}"]
        # The certificate is checked against the URL's host, not the pinned address.
        other = f"https://hook.other.test:{receiver.port}/hook"
        with pytest.raises(httpx.ConnectError, match=r"certificate|hostname"):
            send_pinned(other, "127.0.0.1", b"{}", {}, verify=trusting)
        assert len(receiver.accepted) == 1
    finally:
        receiver.close()


def test_the_public_address_used_here_passes_the_check() -> None:
    """Guards the tests above: were PUBLIC not global, they would prove nothing."""
    assert ipaddress.ip_address(PUBLIC).is_global
