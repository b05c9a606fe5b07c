"""An attacker's probe of invitations and statements: who may invite whom where, what an
invitation shows, that a token makes one user however many redeem it at once, and that a
tenant named in a URL cannot write into the answer's headers."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

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
metadata: {name: tad, tenant: acme}
spec: {role: tenant-admin}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: alice, tenant: acme}
spec: {role: member}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: gad, tenant: globex}
spec: {role: tenant-admin}
"""


@dataclass
class World:
    server: ServerProcess
    http: httpx.Client
    tokens: dict[str, str]

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def invite(self, who: str, name: str, tenant: str, user: str, **spec: Any) -> httpx.Response:
        body = {
            "apiVersion": "aipaas/v1",
            "kind": "Invitation",
            "metadata": {"name": name, "tenant": tenant},
            "spec": {"user": user, **spec},
        }
        return self.http.post("/api/v1/invitations", json=body, headers=self.auth(who))

    def redeem(self, token: str) -> httpx.Response:
        return self.http.post("/api/v1/invitations/redeem", json={"token": token})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    data = tmp_path_factory.mktemp("probe-finops") / "data"
    server = ServerProcess(data, backend="sim", extra=["--no-controller"]).start()
    http = httpx.Client(base_url=server.url, timeout=30)
    try:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        answer = http.post("/api/v1/apply", content=SETUP, headers=admin)
        assert answer.status_code == 200, answer.text
        tokens = {"admin": ADMIN}
        for user, tenant in (("tad", "acme"), ("alice", "acme"), ("gad", "globex")):
            made = http.post("/api/v1/tokens", json={"user": user, "tenant": tenant}, headers=admin)
            assert made.status_code == 201, made.text
            tokens[user] = made.json()["token"]
        yield World(server, http, tokens)
    finally:
        http.close()
        server.stop()


def test_who_may_invite_whom_and_where(world: World) -> None:
    assert world.invite("alice", "by-member", "acme", "m1").status_code == 403
    refused = world.invite("tad", "into-globex", "globex", "spy")
    assert refused.status_code == 404 and "globex" in refused.json()["message"]
    assert world.invite("tad", "as-admin", "acme", "boss", role="platform-admin").status_code == 422
    assert world.invite("tad", "existing", "acme", "alice").status_code == 409
    # The invitation's tenant is the caller's when it names none: never another's.
    made = world.invite("gad", "no-tenant", "", "gnew")
    assert made.status_code in (201, 422), made.text
    if made.status_code == 201:
        assert made.json()["invitation"]["metadata"]["tenant"] == "globex"


def test_an_invitation_shows_its_token_once_and_to_its_tenant_only(world: World) -> None:
    made = world.invite("tad", "shown-once", "acme", "newbie")
    assert made.status_code == 201, made.text
    token = made.json()["token"]
    for who, params, want in [
        ("tad", {}, 200),
        ("alice", {}, 200),
        ("gad", {"tenant": "acme"}, 404),
    ]:
        answer = world.http.get(
            "/api/v1/invitations/shown-once", params=params, headers=world.auth(who)
        )
        assert answer.status_code == want, answer.text
        assert token not in answer.text
    for path in ("/api/v1/invitations", "/api/v1/events", "/api/v1/dashboard/events"):
        answer = world.http.get(path, params={"tenant": "acme"}, headers=world.auth("admin"))
        assert answer.status_code == 200 and token not in answer.text, path
    theirs = world.http.get("/api/v1/invitations", headers=world.auth("gad")).json()["items"]
    assert [i["metadata"]["name"] for i in theirs if i["metadata"]["tenant"] == "acme"] == []


def test_a_token_redeemed_at_once_by_many_makes_one_user(world: World) -> None:
    made = world.invite("tad", "raced", "acme", "raced-user", role="viewer")
    assert made.status_code == 201, made.text
    token = made.json()["token"]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: world.redeem(token), range(8)))
    codes = sorted(a.status_code for a in answers)
    assert codes.count(201) == 1, codes
    assert set(codes) <= {201, 404, 409}, codes
    won = next(a for a in answers if a.status_code == 201).json()
    assert (won["user"], won["tenant"], won["role"]) == ("raced-user", "acme", "viewer")
    assert world.redeem(token).status_code == 404  # used
    # The new user is the invitation's role in the invitation's tenant, and no more.
    mine = {"Authorization": f"Bearer {won['token']}"}
    assert world.http.get("/api/v1/jobs", headers=mine).status_code == 200
    globex = world.http.get("/api/v1/jobs", params={"tenant": "globex"}, headers=mine)
    assert globex.status_code == 404
    job = (
        "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: j}\n"
        'spec: {queue: default, tasks: [{name: w, command: ["true"]}]}\n'
    )
    assert world.http.post("/api/v1/apply", content=job, headers=mine).status_code == 403


def test_an_expired_or_revoked_invitation_redeems_nothing(world: World) -> None:
    short = world.invite("tad", "short", "acme", "late", expiresIn="1s")
    revoked = world.invite("tad", "revoked", "acme", "unwanted")
    assert short.status_code == revoked.status_code == 201
    gone = world.http.delete("/api/v1/invitations/revoked", headers=world.auth("tad"))
    assert gone.status_code == 200, gone.text
    assert world.redeem(revoked.json()["token"]).status_code == 404
    time.sleep(1.2)
    assert world.redeem(short.json()["token"]).status_code == 404
    for bogus in ("", "aipinv_", "aip_" + "x" * 40, "aipinv_" + "x" * 400, "\x00"):
        assert world.redeem(bogus).status_code in (404, 422), bogus
    users = world.http.get("/api/v1/users", params={"tenant": "acme"}, headers=world.auth("tad"))
    names = {u["metadata"]["name"] for u in users.json()["items"]}
    assert not names & {"late", "unwanted"}


@pytest.mark.parametrize(
    "tenant",
    ['x"; filename="evil', "globex%0D%0AX-Evil:%201", "UPPER", "a" * 64],
)
def test_a_tenant_in_the_statement_url_is_a_name_not_a_header(world: World, tenant: str) -> None:
    answer = world.http.get(
        f"/api/v1/statements/{tenant}", params={"format": "csv"}, headers=world.auth("admin")
    )
    assert answer.status_code == 422, answer.text
    assert [f["path"] for f in answer.json()["fields"]] == ["tenant"]
    assert "x-evil" not in answer.headers
    assert "evil" not in answer.headers.get("content-disposition", "")


def test_a_statement_of_ones_own_tenant_names_it_in_its_file(world: World) -> None:
    answer = world.http.get(
        "/api/v1/statements/acme", params={"format": "csv"}, headers=world.auth("alice")
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-disposition"].startswith('attachment; filename="acme-')
