"""Who a token is for, kept a short while per API process, and forgotten when it changes."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from aipaas.server.app import create_app
from aipaas.server.auth import PrincipalCache
from aipaas.server.routes import SMALL_BODY_BYTES
from aipaas.tenancy.principal import Principal
from aipaas.tenancy.tokens import hash_token
from tests.unit.server.api_world import ADMIN, Api

ROLE_VIEWER = """
apiVersion: aipaas/v1
kind: User
metadata: {name: alice, tenant: acme}
spec: {role: viewer}
"""
JOB = """
apiVersion: aipaas/v1
kind: Job
metadata: {name: j1}
spec: {queue: research, tasks: [{name: w, command: ["true"]}]}
"""


def test_entries_expire_after_their_ttl() -> None:
    cache = PrincipalCache(ttl=0.05)
    alice = Principal("alice", "acme", "member")  # type: ignore[arg-type]
    cache.put("h", alice)
    assert cache.get("h") == alice
    time.sleep(0.08)
    assert cache.get("h") is None


def test_a_role_change_applies_at_once_in_the_same_process(api: Api) -> None:
    alice = api.as_("alice")
    assert api.client.get("/api/v1/whoami", headers=alice).json()["role"] == "member"
    changed = api.client.post("/api/v1/apply", content=ROLE_VIEWER, headers=api.as_("admin"))
    assert changed.status_code == 200, changed.text
    assert api.client.get("/api/v1/whoami", headers=alice).json()["role"] == "viewer"
    refused = api.client.post("/api/v1/apply", content=JOB, headers=alice)
    assert refused.status_code == 403


def test_another_process_sees_a_deleted_user_within_the_ttl(api: Api) -> None:
    # A second API on the same database stands for a second worker process.
    other_app = create_app(api.store)
    other_app.state.principals = PrincipalCache(ttl=0.2)
    with TestClient(other_app) as other:
        alice = api.as_("alice")
        assert other.get("/api/v1/whoami", headers=alice).status_code == 200
        deleted = api.client.delete(
            "/api/v1/users/alice?tenant=acme", headers={"Authorization": f"Bearer {ADMIN}"}
        )
        assert deleted.status_code == 200, deleted.text
        assert api.client.get("/api/v1/whoami", headers=alice).status_code == 401
        time.sleep(0.25)
        assert other.get("/api/v1/whoami", headers=alice).status_code == 401


def test_a_bad_token_is_never_remembered(api: Api) -> None:
    cache: PrincipalCache = api.client.app.state.principals  # type: ignore[attr-defined]
    for _ in range(2):
        answer = api.client.get("/api/v1/whoami", headers={"Authorization": "Bearer nope"})
        assert answer.status_code == 401
    assert cache.get(hash_token("nope")) is None
    assert hash_token("nope") not in cache._entries


def _jobs(count: int, prefix: str) -> str:
    return "\n---\n".join(
        JOB.replace("name: j1", f"name: {prefix}-{i}").replace(
            "spec:", f"# {'padding ' * 40}\nspec:"
        )
        for i in range(count)
    )


def test_small_and_large_bodies_are_applied_alike(api: Api) -> None:
    alice = api.as_("alice")
    assert api.client.get("/api/v1/whoami", headers=alice).status_code == 200  # now remembered
    small = _jobs(2, "small")
    large = _jobs(60, "large")
    assert len(small) < SMALL_BODY_BYTES < len(large)
    for body, count in ((small, 2), (large, 60)):
        answer = api.client.post("/api/v1/apply", content=body, headers=alice)
        assert answer.status_code == 200, answer.text
        assert [i["action"] for i in answer.json()["items"]] == ["created"] * count
        again = api.client.post("/api/v1/apply", content=body, headers=alice)
        assert [i["action"] for i in again.json()["items"]] == ["unchanged"] * count
    listed = api.client.get("/api/v1/jobs", headers=alice).json()["items"]
    assert len([j for j in listed if j["metadata"]["name"].startswith(("small", "large"))]) == 62
