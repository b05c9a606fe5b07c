"""A real HTTP server in this process (uvicorn in a thread, no controller) over a temporary
store, with two tenants, their users and tokens: the CLI and the SDK talk to it as they would
to `aipaas server`, streams included. The tests play the controller by writing statuses."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from typer.testing import CliRunner, Result

from aipaas.api.meta import Object
from aipaas.cli.app import app
from aipaas.client import Client
from aipaas.server.app import create_app
from aipaas.server.bootstrap import ensure_admin_token
from aipaas.store import Store
from aipaas.store.pgtest import ThrowawayPostgres, unavailable_reason

ADMIN = "cli-admin-token"
SETUP = """
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: rival}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: batch, tenant: acme}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: rival}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: alice, tenant: acme}
spec: {role: member}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: rick, tenant: rival}
spec: {role: member}
"""


def job_yaml(
    name: str, *, tenant: str = "acme", queue: str = "research", gpus: int = 1, labels: str = "{}"
) -> str:
    return f"""apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, tenant: {tenant}, labels: {labels}}}
spec:
  queue: {queue}
  tasks: [{{name: w, replicas: 2, command: ["true"], resources: {{gpu: {gpus}}}}}]
"""


@dataclass
class World:
    url: str
    store: Store
    alice: str  # a member of acme
    rick: str  # a member of rival
    runner: CliRunner
    app: FastAPI

    def client(self, token: str = ADMIN) -> Client:
        return Client(self.url, token)

    def cli(self, *args: str, token: str = ADMIN, input: str | None = None) -> Result:
        env = {"AIPAAS_URL": self.url, "AIPAAS_TOKEN": token, "AIPAAS_CONFIG": "/nonexistent"}
        return self.runner.invoke(app, list(args), env=env, input=input)

    def ok(self, *args: str, token: str = ADMIN) -> str:
        result = self.cli(*args, token=token)
        assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
        return result.stdout

    def set_status(self, kind: str, tenant: str, name: str, **status: Any) -> Object:
        """What the controller would write."""
        current = self.store.get(kind, tenant, name)
        wire = current.to_wire()
        merged = {**(wire.get("status") or {}), **status}
        parsed = type(current).model_validate({**wire, "status": merged})
        return self.store.update_status(current, getattr(parsed, "status", None))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    store = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    yield from _serve(store, tmp_path)


@pytest.fixture(scope="session")
def postgres() -> Iterator[ThrowawayPostgres]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    server = ThrowawayPostgres()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def pg_world(tmp_path: Path, postgres: ThrowawayPostgres) -> Iterator[World]:
    """The same on PostgreSQL (the watch streams' time and id queries differ by database)."""
    postgres.reset()
    yield from _serve(Store.open(postgres.url), tmp_path)


def _serve(store: Store, tmp_path: Path) -> Iterator[World]:
    ensure_admin_token(store, tmp_path / "admin-token", ADMIN)
    application = create_app(store)
    application.state.watch_poll_seconds = 0.05
    # The server is handed a socket bound here: no other process can take its port between
    # choosing it and listening on it.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = int(listener.getsockname()[1])
    config = uvicorn.Config(application, log_level="error")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60  # a loaded machine starts it slowly
    while not server.started:
        assert thread.is_alive(), "the test server stopped"
        assert time.monotonic() < deadline, "the test server did not start"
        time.sleep(0.01)
    with Client(url, ADMIN) as admin:
        admin.apply(SETUP)
        alice = admin.create_token("alice", "acme")["token"]
        rick = admin.create_token("rick", "rival")["token"]
    try:
        yield World(url, store, alice, rick, CliRunner(), application)
    finally:
        server.should_exit = True
        thread.join(60)
        listener.close()
        store.close()
