"""An in-process API (no controller) with two tenants and a user of every role."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from aipaas.server.app import create_app
from aipaas.server.bootstrap import ensure_admin_token
from aipaas.store import Store

ADMIN = "admin-secret-token"
SETUP = """
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
spec: {quota: {gpu: 8, cpu: 64, memory: 512Gi}}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: globex}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: globex}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: alice, tenant: acme}
spec: {role: member}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: vera, tenant: acme}
spec: {role: viewer}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: tad, tenant: acme}
spec: {role: tenant-admin}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: bob, tenant: globex}
spec: {role: member}
---
apiVersion: aipaas/v1
kind: Job
metadata: {name: secret, tenant: globex}
spec:
  queue: research
  tasks: [{name: w, command: ["true"]}]
"""


class Api:
    """A TestClient and a token per user."""

    def __init__(self, client: TestClient, store: Store) -> None:
        self.client = client
        self.store = store
        self.tokens = {"admin": ADMIN}

    def as_(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[user]}"}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    store = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    ensure_admin_token(store, tmp_path / "admin-token", ADMIN)
    app = create_app(store, max_body_bytes=64 * 1024)
    with TestClient(app) as client:
        result = Api(client, store)
        answer = client.post("/api/v1/apply", content=SETUP, headers=result.as_("admin"))
        assert answer.status_code == 200, answer.text
        for user, tenant in (
            ("alice", "acme"),
            ("vera", "acme"),
            ("tad", "acme"),
            ("bob", "globex"),
        ):
            made = client.post(
                "/api/v1/tokens", json={"user": user, "tenant": tenant}, headers=result.as_("admin")
            )
            assert made.status_code == 201, made.text
            result.tokens[user] = made.json()["token"]
        yield result
    store.close()
