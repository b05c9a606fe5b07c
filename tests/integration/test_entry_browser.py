"""What a tenant's replica can do to the dashboard through the entry point, in a real browser
(Debian's Chromium through Playwright): the replica's page shares the server's origin with the
API and the dashboard, so a header that acts on the origin would act on every signed-in tab.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from playwright.sync_api import expect

from aipaas.api.service import Endpoint, ServiceStatus
from aipaas.store import Store
from tests.integration.dashboard_browser import Browser, browser_or_skip
from tests.support.server_process import ADMIN, ServerProcess

SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: globex}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: alice, tenant: acme}
spec: {role: member}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: globex}
---
apiVersion: aipaas/v1
kind: Service
metadata: {name: app, tenant: globex}
spec:
  queue: research
  public: true
  template: {command: ["true"]}
"""


class _ClearingReplica(BaseHTTPRequestHandler):
    """A replica whose every page tells the browser to clear the site's data and cookies."""

    def do_GET(self) -> None:
        body = b"<html><body><p id=done>signed out</p></body></html>"
        self.send_response(200)
        self.send_header("Clear-Site-Data", '"cache", "cookies", "storage"')
        self.send_header("Set-Cookie", "tracker=globex; Path=/")
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@dataclass
class World:
    server: ServerProcess
    token: str


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    replica = ThreadingHTTPServer(("127.0.0.1", 0), _ClearingReplica)
    threading.Thread(target=replica.serve_forever, daemon=True).start()
    data = tmp_path_factory.mktemp("entry-browser") / "data"
    server = ServerProcess(data, backend="sim", extra=["--no-controller"]).start()
    store = Store.open(f"sqlite:///{data / 'aipaas.db'}")
    try:
        with server.http(ADMIN) as client:
            client.post("/apply", content=SETUP).raise_for_status()
            made = client.post("/tokens", json={"user": "alice", "tenant": "acme"})
            made.raise_for_status()
        stored = store.get("Service", "globex", "app")
        here = Endpoint(replica="app-0", address="127.0.0.1", port=int(replica.server_address[1]))
        store.update_status(
            stored,
            ServiceStatus(phase="Running", endpoints=[here]),
            expected_version=stored.metadata.resource_version,
        )
        yield World(server, made.json()["token"])
    finally:
        store.close()
        server.stop()
        replica.shutdown()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with browser_or_skip() as found:
        yield found


def test_a_replica_page_cannot_sign_the_dashboard_out_or_set_cookies(
    browser: Browser, world: World
) -> None:
    context = browser.new_context()
    context.set_default_timeout(60_000)
    dashboard = context.new_page()
    dashboard.goto(world.server.url + "/")
    dashboard.fill("#token", world.token)
    dashboard.click("#login-form button")
    expect(dashboard.locator("#whoami")).to_contain_text("alice")
    # Another tab of the same browser opens a page of globex's public service.
    other = context.new_page()
    other.goto(world.server.url + "/services/globex/app/logout")
    expect(other.locator("#done")).to_have_text("signed out")
    assert context.cookies() == []
    # The dashboard's tab keeps its session: a reload finds the token and stays signed in.
    dashboard.reload()
    assert dashboard.evaluate("sessionStorage.getItem('aipaas.token')") == world.token
    expect(dashboard.locator("#whoami")).to_contain_text("alice")
    context.close()
