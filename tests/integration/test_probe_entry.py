"""An attacker's probe of the services' entry point (/services/<tenant>/<name>/...): what a
caller of one tenant can make another tenant's replica see, and what a caller can make its own
replica believe. The replica is a recording HTTP server in this process; the services' status
names it as their one endpoint (written to the store as the controller would, the server runs
without one so that nothing writes it back)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from aipaas.api.service import Endpoint, ServiceStatus
from aipaas.store import Store
from tests.support.server_process import ADMIN, ServerProcess

SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: globex}
"""
SERVICE = """---
apiVersion: aipaas/v1
kind: Queue
metadata: {{name: research, tenant: {tenant}}}
---
apiVersion: aipaas/v1
kind: Service
metadata: {{name: {name}, tenant: {tenant}}}
spec:
  queue: research
  public: {public}
  requestTimeoutSeconds: 1
  template: {{command: ["true"]}}
"""
USERS = """---
apiVersion: aipaas/v1
kind: User
metadata: {name: alice, tenant: acme}
spec: {role: member}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: bob, tenant: globex}
spec: {role: member}
"""


@dataclass
class Heard:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class Replica:
    """Answers every request with 200 and remembers what it was sent."""

    heard: list[Heard] = field(default_factory=list)
    port: int = 0

    def handler(self) -> type[BaseHTTPRequestHandler]:
        replica = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                replica.heard.append(Heard(self.command, self.path, headers))
                body = json.dumps({"path": self.path}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = answer

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def last(self) -> Heard:
        assert self.heard, "the replica heard nothing"
        return self.heard[-1]


@dataclass
class World:
    server: ServerProcess
    replica: Replica
    tokens: dict[str, str]
    http: httpx.Client

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    replica = Replica()
    listener = ThreadingHTTPServer(("127.0.0.1", 0), replica.handler())
    replica.port = int(listener.server_address[1])
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    data = tmp_path_factory.mktemp("probe-entry") / "data"
    server = ServerProcess(data, backend="sim", extra=["--no-controller"]).start()
    http = httpx.Client(base_url=server.url, timeout=30)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    services = [("acme", "svc", "false"), ("globex", "svc", "false"), ("globex", "open", "true")]
    text = (
        SETUP + USERS + "".join(SERVICE.format(tenant=t, name=n, public=p) for t, n, p in services)
    )
    store = Store.open(f"sqlite:///{data / 'aipaas.db'}")
    try:
        answer = http.post("/api/v1/apply", content=text, headers=admin)
        assert answer.status_code == 200, answer.text
        for tenant, name, _ in services:
            stored = store.get("Service", tenant, name)
            here = Endpoint(replica="r0", address="127.0.0.1", port=replica.port)
            store.update_status(
                stored,
                ServiceStatus(phase="Running", endpoints=[here]),
                expected_version=stored.metadata.resource_version,
            )
        tokens = {}
        for user, tenant in (("alice", "acme"), ("bob", "globex")):
            made = http.post("/api/v1/tokens", json={"user": user, "tenant": tenant}, headers=admin)
            assert made.status_code == 201, made.text
            tokens[user] = made.json()["token"]
        yield World(server, replica, tokens, http)
    finally:
        store.close()
        http.close()
        server.stop()
        listener.shutdown()


def test_another_tenants_private_service_is_not_found_and_its_replica_hears_nothing(
    world: World,
) -> None:
    world.replica.heard.clear()
    for path in ("/services/globex/svc/", "/services/globex/svc/v1/models"):
        answer = world.http.post(path, json={"x": 1}, headers=world.auth("alice"))
        assert answer.status_code == 404, answer.text
        assert "globex" not in answer.json()["message"]  # not even told the tenant
    for headers in ({}, {"Authorization": "Bearer aip_not-a-token"}):
        assert world.http.get("/services/globex/svc/", headers=headers).status_code == 401
    assert world.replica.heard == []


def test_an_aipaas_token_never_reaches_a_replica_even_of_a_public_service(world: World) -> None:
    """A public service of globex must not collect the tokens of acme's callers (a client that
    sends its token everywhere, as the SDK does): globex could then act as them."""
    answer = world.http.get("/services/globex/open/", headers=world.auth("alice"))
    assert answer.status_code == 200, answer.text
    assert "authorization" not in world.replica.last().headers
    # The service's own credentials are its business, and still reach it.
    answer = world.http.get("/services/globex/open/", headers={"Authorization": "Bearer sk-own"})
    assert answer.status_code == 200
    assert world.replica.last().headers["authorization"] == "Bearer sk-own"
    world.http.get("/services/acme/svc/", headers=world.auth("alice"))
    assert "authorization" not in world.replica.last().headers


def test_the_forwarding_headers_are_the_entry_points_own(world: World) -> None:
    """A caller cannot make the replica believe it came from elsewhere or through another host,
    nor have a header it names in Connection (for this hop only) passed on."""
    answer = world.http.get(
        "/services/acme/svc/who",
        headers={
            **world.auth("alice"),
            "X-Forwarded-For": "10.9.9.9",
            "X-Forwarded-Host": "admin.internal",
            "X-Forwarded-Proto": "https",
            "X-Forwarded-Prefix": "/services/globex/svc",
            "X-Real-IP": "10.9.9.9",
            "Forwarded": "for=10.9.9.9;host=admin.internal",
            "Connection": "keep-alive, X-Hop-Only",
            "X-Hop-Only": "1",
            "X-Kept": "yes",
        },
    )
    assert answer.status_code == 200, answer.text
    heard = world.replica.last().headers
    assert heard["x-forwarded-for"] == "127.0.0.1"  # the socket's peer
    assert heard["x-forwarded-proto"] == "http"
    assert heard["x-forwarded-prefix"] == "/services/acme/svc"
    assert heard["x-forwarded-host"] == f"127.0.0.1:{world.server.port}"
    for spoofed in ("x-real-ip", "forwarded", "x-hop-only"):
        assert spoofed not in heard, spoofed
    assert heard["x-kept"] == "yes"
    assert "admin.internal" not in json.dumps(heard)


@pytest.mark.parametrize(
    ("sent", "want"),
    [
        ("/services/acme/svc/a%3Fb=1", "/a%3Fb=1"),  # an encoded '?' is not a query
        ("/services/acme/svc/a%23frag", "/a%23frag"),
        ("/services/acme/svc/a%20b?q=1%262", "/a%20b?q=1%262"),
        ("/services/acme/svc/a%2Fb", "/a%2Fb"),
    ],
)
def test_the_replica_is_sent_the_path_as_the_caller_encoded_it(
    world: World, sent: str, want: str
) -> None:
    world.replica.heard.clear()
    answer = world.http.get(sent, headers=world.auth("alice"))
    assert answer.status_code == 200, answer.text
    assert world.replica.last().path == want


def test_an_encoded_line_break_in_the_path_goes_nowhere(world: World) -> None:
    world.replica.heard.clear()
    sent = "/services/acme/svc/a%0D%0AX-Injected:%201"
    answer = world.http.get(sent, headers=world.auth("alice"))
    assert answer.status_code in (200, 404), answer.text
    for heard in world.replica.heard:
        assert "x-injected" not in heard.headers and "\n" not in heard.path


def test_dot_segments_stay_inside_the_callers_service(world: World) -> None:
    """Sent raw (no client tidies it): ``..`` after the service name reaches the same service's
    replica, never another tenant's service."""
    world.replica.heard.clear()
    token = world.tokens["alice"]
    request = (
        f"GET /services/acme/svc/../../globex/svc/ HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", world.server.port), timeout=60) as raw:
        raw.sendall(request)
        reply = raw.recv(4096)
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    assert world.replica.last().headers["x-forwarded-prefix"] == "/services/acme/svc"
    answer = world.http.get(
        "/services/acme%2F..%2Fglobex/svc/", headers=world.auth("alice")
    )  # a tenant name with an encoded slash is no tenant
    assert answer.status_code == 404
    assert len(world.replica.heard) == 1


def test_a_body_past_the_limit_is_refused_before_the_replica(world: World) -> None:
    world.replica.heard.clear()
    answer = world.http.post(
        "/services/acme/svc/upload", content=b"x" * (8 << 20), headers=world.auth("alice")
    )
    assert answer.status_code == 413
    assert world.replica.heard == []
