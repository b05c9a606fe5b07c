"""Log followers (``logs -f``) have budgets per caller and per tenant: one caller, or one
tenant's users together, cannot take every place of the process, and another tenant can still
follow its own logs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from tests.support.server_process import ServerProcess

MAX_FOLLOWERS = 32  # AIPAAS_LOG_MAX_FOLLOWERS: a caller may hold 32 // 8, a tenant 32 // 2
PER_CALLER = 4
PER_TENANT = 16
WORLD = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: beta}
"""
TENANT = """---
apiVersion: aipaas/v1
kind: Queue
metadata: {{name: research, tenant: {tenant}}}
---
apiVersion: aipaas/v1
kind: Job
metadata:
  name: train
  tenant: {tenant}
  annotations: {{sim.aipaas.dev/duration: "3600"}}
spec:
  queue: research
  tasks: [{{name: w, command: [train], resources: {{cpu: 1}}}}]
"""
USER = """---
apiVersion: aipaas/v1
kind: User
metadata: {{name: {name}, tenant: {tenant}}}
spec: {{role: viewer}}
"""
ACME_USERS = ["u0", "u1", "u2", "u3", "u4"]


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    server = ServerProcess(
        tmp_path_factory.mktemp("followers") / "data",
        backend="sim",
        env={"AIPAAS_LOG_MAX_FOLLOWERS": str(MAX_FOLLOWERS)},
    ).start()
    users = [(name, "acme") for name in ACME_USERS] + [("bob", "beta")]
    manifest = (
        WORLD
        + TENANT.format(tenant="acme")
        + TENANT.format(tenant="beta")
        + "".join(USER.format(name=name, tenant=tenant) for name, tenant in users)
    )
    tokens: dict[str, str] = {}
    try:
        with server.http() as client:
            client.post("/apply", content=manifest).raise_for_status()
            for name, tenant in users:
                answer = client.post("/tokens", json={"user": name, "tenant": tenant})
                answer.raise_for_status()
                tokens[name] = answer.json()["token"]
        server.wait_phase("train", "Running")
        server.wait_phase("train", "Running", tenant="beta")
        yield server, tokens
    finally:
        server.close()


def follow(stack: ExitStack, server: ServerProcess, token: str, tenant: str) -> httpx.Response:
    """Open one follower and keep it open (until ``stack`` closes); its answer's status."""
    client = stack.enter_context(server.http(token))
    request = client.build_request(
        "GET", "/jobs/train/logs", params={"tenant": tenant, "follow": "true"}
    )
    response = client.send(request, stream=True)
    stack.callback(response.close)
    return response


def test_one_caller_cannot_take_every_follower_place(
    world: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, tokens = world
    with ExitStack() as stack:
        answers = [follow(stack, server, tokens["u0"], "acme") for _ in range(PER_CALLER + 2)]
        codes = [a.status_code for a in answers]
        assert codes == [200] * PER_CALLER + [429, 429], codes
        answers[-1].read()
        assert "you already follow 4 logs" in answers[-1].json()["message"]
        # Another tenant follows its own logs, and the same tenant's other users too.
        assert follow(stack, server, tokens["bob"], "beta").status_code == 200
        assert follow(stack, server, tokens["u1"], "acme").status_code == 200


def test_one_tenants_users_together_leave_places_to_other_tenants(
    world: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, tokens = world
    with ExitStack() as stack:
        for name in ACME_USERS[:4]:
            for _ in range(PER_CALLER):
                assert follow(stack, server, tokens[name], "acme").status_code == 200
        refused = follow(stack, server, tokens["u4"], "acme")
        assert refused.status_code == 429
        refused.read()
        assert "tenant acme's logs already have 16 followers" in refused.json()["message"]
        assert follow(stack, server, tokens["bob"], "beta").status_code == 200
    # The places come back when the followers leave (the server sees them go at once).
    deadline = time.monotonic() + 10
    with ExitStack() as stack:
        while follow(stack, server, tokens["u4"], "acme").status_code != 200:
            assert time.monotonic() < deadline, "the places never came back"
            time.sleep(0.2)
