"""Who gets what, on every route: a table of expected answers against one real server.

Callers: a platform admin, a tenant admin, a member and a viewer (of tenant acme), a metrics
reader (no tenant), and three tokens that must not work: an unknown one, a revoked one and an
expired one. Every route of the application has a row (``test_every_route_has_a_row`` fails
on a route without one, or a row without a route); each row gives one request per caller and
the answer expected. Cross-tenant rows check that acme's callers find nothing of globex (404).

Requests that change something act on an object of the caller's own (``{who}`` in the path or
body), so the rows do not depend on the order they run in.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from aipaas.cli.failure import EXIT_UNAUTHORISED
from aipaas.server.app import create_app
from aipaas.store import Store
from aipaas.store.pgtest import ThrowawayPostgres
from tests.support.server_process import ADMIN, ServerProcess

REAL = ("admin", "tad", "alice", "vera")  # platform admin, tenant admin, member, viewer
CALLERS = (*REAL, "scraper", "bad", "revoked", "expired")
NOT_TOKENS = ("bad", "revoked", "expired")
# Jobs run on simulated nodes for an hour: they stay Running while the rows are asked.
SIM = 'sim.aipaas.dev/duration: "3600"'

SETUP = (
    """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: globex}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: scraper}
spec: {role: metrics-reader}
"""
    + "".join(
        f"""---
apiVersion: aipaas/v1
kind: Queue
metadata: {{name: {name}, tenant: {tenant}}}
"""
        for tenant, name in [("acme", "research"), ("globex", "research")]
        + [("acme", f"q-{who}") for who in REAL]
    )
    + "".join(
        f"""---
apiVersion: aipaas/v1
kind: User
metadata: {{name: {name}, tenant: {tenant}}}
spec: {{role: {role}}}
"""
        for name, tenant, role in [
            ("tad", "acme", "tenant-admin"),
            ("alice", "acme", "member"),
            ("vera", "acme", "viewer"),
            ("bob", "globex", "member"),
        ]
        + [(f"del-{who}", "acme", "viewer") for who in REAL]
    )
    + "".join(
        f"""---
apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, tenant: {tenant}, annotations: {{{SIM}}}}}
spec: {{queue: research, tasks: [{{name: w, command: ["true"]}}]}}
"""
        for name, tenant in [("j-acme", "acme"), ("secret", "globex")]
        + [(f"cancel-{who}", "acme") for who in REAL]
    )
    + "".join(
        f"""---
apiVersion: aipaas/v1
kind: Secret
metadata: {{name: creds, tenant: {tenant}}}
spec: {{data: {{accessKeyId: AKIA-{tenant}, secretAccessKey: sekrit-{tenant}}}}}
---
apiVersion: aipaas/v1
kind: Dataset
metadata: {{name: d-{tenant}, tenant: {tenant}}}
spec: {{source: "s3://bucket-{tenant}/train", secretRef: creds}}
---
apiVersion: aipaas/v1
kind: Service
metadata: {{name: svc, tenant: {tenant}}}
spec:
  queue: research
  queueTimeoutSeconds: 0.05
  template: {{command: ["true"]}}
"""
        for tenant in ("acme", "globex")
    )
)


def job(name: str, tenant: str = "acme") -> str:
    return (
        f"apiVersion: aipaas/v1\nkind: Job\n"
        f"metadata: {{name: {name}, tenant: {tenant}, annotations: {{{SIM}}}}}\n"
        'spec: {queue: research, tasks: [{name: w, command: ["true"]}]}\n'
    )


def invitation(tenant: str) -> str:
    return (
        '{"apiVersion": "aipaas/v1", "kind": "Invitation", '
        f'"metadata": {{"name": "inv-{{who}}", "tenant": "{tenant}"}}, '
        '"spec": {"user": "new-{who}"}}'
    )


@dataclass(frozen=True)
class Call:
    """One request; ``{who}`` in the path or body is the caller's name."""

    method: str
    path: str
    params: dict[str, str] = field(default_factory=dict)
    json: Any = None
    content: str | None = None
    queue_body: bool = False  # PUT: the body is the caller's queue as stored now


@dataclass(frozen=True)
class Row:
    call: Call
    want: dict[str, int]


def api(admin: int, tad: int, alice: int, vera: int) -> dict[str, int]:
    """An API route: a metrics reader is refused (403), the tokens that do not work are 401."""
    return {
        "admin": admin,
        "tad": tad,
        "alice": alice,
        "vera": vera,
        "scraper": 403,
        **dict.fromkeys(NOT_TOKENS, 401),
    }


PUBLIC = dict.fromkeys(CALLERS, 200)
PROXY_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
DASHBOARD_ASSET = "style.css"
ACME = {"tenant": "acme"}
#: a Call's method for a WebSocket handshake (its params are the query)
WEBSOCKET = "WEBSOCKET"

# (method, route as the application declares it) -> the row.
MATRIX: dict[tuple[str, str], Row] = {
    ("GET", "/healthz"): Row(Call("GET", "/healthz"), PUBLIC),
    ("GET", "/readyz"): Row(Call("GET", "/readyz"), PUBLIC),
    ("GET", "/openapi.json"): Row(Call("GET", "/openapi.json"), PUBLIC),
    ("GET", "/docs"): Row(Call("GET", "/docs"), PUBLIC),
    ("GET", "/docs/assets"): Row(Call("GET", "/docs/assets/swagger-ui.css"), PUBLIC),
    ("GET", "/metrics"): Row(
        Call("GET", "/metrics"),
        {
            "admin": 200,
            "scraper": 200,
            "tad": 403,
            "alice": 403,
            "vera": 403,
            **dict.fromkeys(NOT_TOKENS, 401),
        },
    ),
    ("GET", "/api/v1/whoami"): Row(Call("GET", "/api/v1/whoami"), api(200, 200, 200, 200)),
    ("POST", "/api/v1/apply"): Row(
        Call("POST", "/api/v1/apply", content=job("apply-{who}")), api(200, 200, 200, 403)
    ),
    # the simulated backend runs no commands in tasks: a caller who may exec is told so (503)
    ("POST", "/api/v1/jobs/{name}/exec"): Row(
        Call("POST", "/api/v1/jobs/j-acme/exec", ACME, json={"command": ["hostname"]}),
        api(503, 503, 503, 403),
    ),
    # the exec session's WebSocket (a GET handshake), refused as POST .../exec is
    ("GET", "/api/v1/jobs/{name}/exec"): Row(
        Call(WEBSOCKET, "/api/v1/jobs/j-acme/exec", {**ACME, "command": "hostname"}),
        api(503, 503, 503, 403),
    ),
    ("POST", "/api/v1/jobs/{name}/cancel"): Row(
        Call("POST", "/api/v1/jobs/cancel-{who}/cancel", ACME), api(200, 200, 200, 403)
    ),
    ("GET", "/api/v1/jobs/{name}/logs"): Row(
        Call("GET", "/api/v1/jobs/j-acme/logs", ACME), api(200, 200, 200, 200)
    ),
    ("GET", "/api/v1/events"): Row(Call("GET", "/api/v1/events", ACME), api(200, 200, 200, 200)),
    ("GET", "/api/v1/watch/events"): Row(
        Call("GET", "/api/v1/watch/events", {**ACME, "timeoutSeconds": "1"}),
        api(200, 200, 200, 200),
    ),
    ("GET", "/api/v1/watch/{plural}"): Row(
        Call("GET", "/api/v1/watch/jobs", {**ACME, "timeoutSeconds": "1"}),
        api(200, 200, 200, 200),
    ),
    ("GET", "/api/v1/devices"): Row(Call("GET", "/api/v1/devices"), api(200, 200, 200, 200)),
    ("GET", "/api/v1/usage"): Row(Call("GET", "/api/v1/usage", ACME), api(200, 200, 200, 200)),
    ("GET", "/api/v1/cost"): Row(Call("GET", "/api/v1/cost", ACME), api(200, 200, 200, 200)),
    ("GET", "/api/v1/statements/{tenant}"): Row(
        Call("GET", "/api/v1/statements/acme"), api(200, 200, 200, 200)
    ),
    ("GET", "/api/v1/prices"): Row(Call("GET", "/api/v1/prices", ACME), api(200, 200, 200, 200)),
    ("POST", "/api/v1/invitations"): Row(
        Call("POST", "/api/v1/invitations", content=invitation("acme")), api(201, 201, 403, 403)
    ),
    # No bearer token is asked: the invitation is the credential (a bogus one: 404 for all).
    ("POST", "/api/v1/invitations/redeem"): Row(
        Call("POST", "/api/v1/invitations/redeem", json={"token": "aipinv_bogus"}),
        dict.fromkeys(CALLERS, 404),
    ),
    ("GET", "/api/v1/usage/entries"): Row(
        Call("GET", "/api/v1/usage/entries", ACME), api(200, 200, 200, 200)
    ),
    # The admin passes the role check and is told the entry does not exist.
    ("POST", "/api/v1/usage/corrections"): Row(
        Call("POST", "/api/v1/usage/corrections", json={"corrects": 999999, "reason": "test"}),
        api(404, 403, 403, 403),
    ),
    # A workdir upload is a job submitter's: the body (no tar.gz) is judged only after the role.
    ("POST", "/api/v1/workdirs"): Row(
        Call("POST", "/api/v1/workdirs", ACME, content="not a tar"), api(422, 422, 422, 403)
    ),
    ("POST", "/api/v1/tokens"): Row(
        Call("POST", "/api/v1/tokens", json={"user": "alice", "tenant": "acme"}),
        api(201, 201, 403, 403),
    ),
    ("GET", "/api/v1/tokens"): Row(Call("GET", "/api/v1/tokens"), api(200, 200, 200, 200)),
    ("GET", "/api/v1/tokens/{token_id}"): Row(
        Call("GET", "/api/v1/tokens/{alice-token}"), api(200, 200, 200, 404)
    ),
    # Each caller revokes a spare token of alice's of its own.
    ("DELETE", "/api/v1/tokens/{token_id}"): Row(
        Call("DELETE", "/api/v1/tokens/{spare}"), api(200, 200, 200, 404)
    ),
    ("GET", "/api/v1/{plural}"): Row(Call("GET", "/api/v1/jobs", ACME), api(200, 200, 200, 200)),
    ("GET", "/api/v1/{plural}/{name}"): Row(
        Call("GET", "/api/v1/jobs/j-acme", ACME), api(200, 200, 200, 200)
    ),
    ("PUT", "/api/v1/{plural}/{name}"): Row(
        Call("PUT", "/api/v1/queues/q-{who}", queue_body=True), api(200, 200, 403, 403)
    ),
    ("DELETE", "/api/v1/{plural}/{name}"): Row(
        Call("DELETE", "/api/v1/users/del-{who}", ACME), api(200, 200, 403, 403)
    ),
    ("GET", "/api/v1/lending"): Row(Call("GET", "/api/v1/lending"), api(200, 200, 200, 200)),
    ("POST", "/api/v1/datasets/{name}/warm"): Row(
        Call("POST", "/api/v1/datasets/d-acme/warm", ACME, json={"nodes": []}),
        api(200, 200, 403, 403),  # who may write datasets may warm them
    ),
    **{
        ("GET", f"/api/v1/dashboard/{view}"): Row(
            Call("GET", f"/api/v1/dashboard/{view}", ACME), api(200, 200, 200, 200)
        )
        for view in ("timeline", "cost", "events")
    },
    # The page and its assets hold no data (it reads the API with the signed-in token).
    **{
        ("GET", route): Row(Call("GET", path), PUBLIC)
        for route, path in [
            ("/", "/"),
            ("/dashboard", "/dashboard"),
            ("/dashboard/", "/dashboard/"),
            ("/dashboard/{page}", "/dashboard/jobs"),
            ("/dashboard/assets/{path:path}", "/dashboard/assets/" + DASHBOARD_ASSET),
        ]
    },
    # The entry point: any role of the service's tenant reaches it (503: no replica within its
    # queueTimeoutSeconds); a metrics reader is refused (403); bad tokens are 401.
    **{
        (method, route): Row(
            Call(method, path),
            {**dict.fromkeys(REAL, 503), "scraper": 403, **dict.fromkeys(NOT_TOKENS, 401)},
        )
        for method in PROXY_METHODS
        for route, path in [
            ("/services/{tenant}/{name}", "/services/acme/svc"),
            ("/services/{tenant}/{name}/{path:path}", "/services/acme/svc/v1/models"),
        ]
    },
}

# Reads of every kind, and acme's callers against globex: nothing of it exists for them.
GLOBEX = {"tenant": "globex"}
EXTRA: list[tuple[str, Call, dict[str, int]]] = [
    (f"list {plural}", Call("GET", f"/api/v1/{plural}", ACME), api(200, 200, 200, 200))
    for plural in ("users", "queues", "jobs", "tenants", "nodes", "deviceclasses")
] + [
    (
        f"globex: {label}",
        call,
        {"admin": admin_answer, "tad": 404, "alice": 404, "vera": 404},
    )
    for label, call, admin_answer in [
        ("list jobs", Call("GET", "/api/v1/jobs", GLOBEX), 200),
        ("get job", Call("GET", "/api/v1/jobs/secret", GLOBEX), 200),
        ("job logs", Call("GET", "/api/v1/jobs/secret/logs", GLOBEX), 200),
        ("events", Call("GET", "/api/v1/events", GLOBEX), 200),
        ("watch jobs", Call("GET", "/api/v1/watch/jobs", {**GLOBEX, "timeoutSeconds": "1"}), 200),
        (
            "watch events",
            Call("GET", "/api/v1/watch/events", {**GLOBEX, "timeoutSeconds": "1"}),
            200,
        ),
        ("usage", Call("GET", "/api/v1/usage", GLOBEX), 200),
        ("usage entries", Call("GET", "/api/v1/usage/entries", GLOBEX), 200),
        ("cost", Call("GET", "/api/v1/cost", GLOBEX), 200),
        ("statement", Call("GET", "/api/v1/statements/globex"), 200),
        ("statement csv", Call("GET", "/api/v1/statements/globex", {"format": "csv"}), 200),
        ("prices", Call("GET", "/api/v1/prices", GLOBEX), 200),
        ("invite", Call("POST", "/api/v1/invitations", content=invitation("globex")), 201),
        ("tokens", Call("GET", "/api/v1/tokens", GLOBEX), 200),
        ("bob's token", Call("GET", "/api/v1/tokens/{bob-token}"), 200),
        ("tenant", Call("GET", "/api/v1/tenants/globex"), 200),
        ("user", Call("GET", "/api/v1/users/bob", GLOBEX), 200),
        ("submit", Call("POST", "/api/v1/apply", content=job("x-{who}", "globex")), 200),
        ("cancel", Call("POST", "/api/v1/jobs/secret/cancel", GLOBEX), 200),
        ("exec", Call("POST", "/api/v1/jobs/secret/exec", GLOBEX, json={"command": ["id"]}), 503),
        (
            "exec session",
            Call(WEBSOCKET, "/api/v1/jobs/secret/exec", {**GLOBEX, "command": "id"}),
            503,
        ),
        (
            "token for bob",
            Call("POST", "/api/v1/tokens", json={"user": "bob", "tenant": "globex"}),
            201,
        ),
        ("delete bob", Call("DELETE", "/api/v1/users/bob", GLOBEX), 200),
        ("get secret", Call("GET", "/api/v1/secrets/creds", GLOBEX), 200),
        ("list secrets", Call("GET", "/api/v1/secrets", GLOBEX), 200),
        ("get dataset", Call("GET", "/api/v1/datasets/d-globex", GLOBEX), 200),
        (
            "warm dataset",
            Call("POST", "/api/v1/datasets/d-globex/warm", GLOBEX, json={"nodes": []}),
            200,
        ),
        ("dataset by acme", Call("POST", "/api/v1/datasets/d-globex/warm", json={}), 200),
        (
            "watch secrets",
            Call("GET", "/api/v1/watch/secrets", {**GLOBEX, "timeoutSeconds": "1"}),
            200,
        ),
        ("timeline", Call("GET", "/api/v1/dashboard/timeline", GLOBEX), 200),
        ("dashboard cost", Call("GET", "/api/v1/dashboard/cost", GLOBEX), 200),
        ("dashboard events", Call("GET", "/api/v1/dashboard/events", GLOBEX), 200),
        ("service", Call("GET", "/services/globex/svc/"), 503),
        ("service post", Call("POST", "/services/globex/svc/x", json={}), 503),
    ]
]


class World:
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.tokens: dict[str, str] = {"admin": ADMIN, "bad": "aip_not-a-token"}
        self.ids: dict[str, str] = {}
        self.http = httpx.Client(base_url=server.url, timeout=30)

    def mint(self, user: str, tenant: str | None, **extra: Any) -> dict[str, Any]:
        body = {"user": user, **({"tenant": tenant} if tenant else {}), **extra}
        answer = self.http.post("/api/v1/tokens", json=body, headers=self.auth("admin"))
        assert answer.status_code == 201, answer.text
        made: dict[str, Any] = answer.json()
        return made

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def request(self, who: str, call: Call) -> httpx.Response:
        answer = self._request(who, call)
        # The controller may write the queue's status (a new resourceVersion) between the read
        # and the write: a conflict then says nothing of who may write; read again and retry.
        for _ in range(5):
            if not (call.queue_body and answer.status_code == 409):
                break
            answer = self._request(who, call)
        return answer

    def _request(self, who: str, call: Call) -> httpx.Response:
        names = {"who": who, **self.ids, "spare": self.ids[f"spare-{who}"]}
        path = call.path
        for key, value in names.items():
            path = path.replace("{" + key + "}", value)
        content = call.content.replace("{who}", who) if call.content is not None else None
        body = call.json
        if call.queue_body:
            # The queue as stored (the callers refused before any lookup have none).
            stored = self.http.get(path, params=ACME, headers=self.auth("admin"))
            body = {k: v for k, v in stored.json().items() if k != "status"}
            if stored.status_code == 404:
                body = {
                    "apiVersion": "aipaas/v1",
                    "kind": "Queue",
                    "metadata": {"name": f"q-{who}", "tenant": "acme", "resourceVersion": "1"},
                }
        if call.method == WEBSOCKET:
            return self._handshake(who, path, call.params)
        return self.http.request(
            call.method,
            path,
            params=call.params,
            json=body,
            content=content,
            headers=self.auth(who),
        )

    def _handshake(self, who: str, path: str, params: dict[str, str]) -> httpx.Response:
        """A WebSocket handshake's answer: its refusal, or 101 (then closed at once)."""
        base = str(self.http.base_url).replace("http://", "ws://")
        try:
            with connect(
                f"{base}{path}?{urlencode(params)}",
                additional_headers=self.auth(who),
                open_timeout=30,
            ):
                return httpx.Response(101)
        except InvalidStatus as refused:
            answer = refused.response
            return httpx.Response(answer.status_code, content=bytes(answer.body or b""))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    db = None
    if request.param == "postgresql":
        postgres: ThrowawayPostgres = request.getfixturevalue("postgres_server")
        postgres.reset()
        db = postgres.url
    data = tmp_path_factory.mktemp("matrix") / "data"
    server = ServerProcess(data, backend="sim", db=db).start()
    world = World(server)
    try:
        answer = world.http.post("/api/v1/apply", content=SETUP, headers=world.auth("admin"))
        assert answer.status_code == 200, answer.text
        expired = world.mint("alice", "acme", expiresIn="1s")
        made_at = time.monotonic()
        world.tokens["expired"] = expired["token"]
        for who, tenant in (
            ("tad", "acme"),
            ("alice", "acme"),
            ("vera", "acme"),
            ("scraper", None),
        ):
            made = world.mint(who, tenant)
            world.tokens[who] = made["token"]
            world.ids[f"{who}-token"] = made["id"]
        world.ids["bob-token"] = world.mint("bob", "globex")["id"]
        for who in CALLERS:
            world.ids[f"spare-{who}"] = world.mint("alice", "acme", name=f"spare-{who}")["id"]
        revoked = world.mint("alice", "acme")
        gone = world.http.delete(f"/api/v1/tokens/{revoked['id']}", headers=world.auth("admin"))
        assert gone.status_code == 200, gone.text
        world.tokens["revoked"] = revoked["token"]
        time.sleep(max(0.0, made_at + 1.2 - time.monotonic()))  # the expired one has expired
        yield world
    finally:
        world.http.close()
        server.stop()


def declared_routes(server_url: str, tmp_path: Path) -> set[tuple[str, str]]:
    """Every route: the server's OpenAPI document, and the routes kept out of it (health,
    metrics, docs) as the application object lists them."""
    document = httpx.get(server_url + "/openapi.json", timeout=30).json()
    routes = {
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method in operations
        if method.upper() in {"GET", "POST", "PUT", "DELETE", "PATCH"}
    }
    store = Store.open(f"sqlite:///{tmp_path / 'routes.db'}")
    try:
        for prefix, route in _flattened(create_app(store).routes):
            if getattr(route, "include_in_schema", False) or not hasattr(route, "path"):
                continue
            # a Mount serves GETs, and a WebSocket's handshake is one
            methods = getattr(route, "methods", None) or {"GET"}
            routes |= {(m, prefix + route.path) for m in methods if m != "HEAD"}
    finally:
        store.close()
    return routes


def _flattened(routes: Sequence[Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """The routes, those of included routers too (FastAPI keeps an included router whole: its
    routes kept out of the OpenAPI document, the entry point's and the dashboard's, are there),
    each with the prefix its path lacks: a router's own prefix is in its routes' paths, and the
    including router's is in the inclusion (the exec session's router, under /api/v1)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            context = getattr(route, "include_context", None)
            yield from _flattened(inner.routes, prefix + getattr(context, "prefix", ""))
        else:
            yield prefix, route


def test_every_route_has_a_row(world: World, tmp_path: Path) -> None:
    routes = declared_routes(world.server.url, tmp_path)
    assert sorted(routes - MATRIX.keys()) == [], "routes without a row in MATRIX"
    assert sorted(MATRIX.keys() - routes) == [], "rows for routes that do not exist"


@pytest.mark.parametrize("who", CALLERS)
@pytest.mark.parametrize("route", list(MATRIX), ids=[f"{m} {p}" for m, p in MATRIX])
def test_matrix(world: World, route: tuple[str, str], who: str) -> None:
    row = MATRIX[route]
    answer = world.request(who, row.call)
    assert answer.status_code == row.want[who], answer.text[:300]
    if answer.status_code == 401:
        body = answer.json()
        assert body["code"] == "Unauthenticated"
        assert who != "revoked" or "revoked" in body["message"]
        assert who != "expired" or "expired" in body["message"]


@pytest.mark.parametrize("who", CALLERS)
@pytest.mark.parametrize(
    ("call", "want"), [(c, w) for _, c, w in EXTRA], ids=[label for label, _, _ in EXTRA]
)
def test_reads_and_other_tenants(world: World, call: Call, want: dict[str, int], who: str) -> None:
    if who not in want:
        want = {**want, "scraper": 403, **dict.fromkeys(NOT_TOKENS, 401)}
    answer = world.request(who, call)
    assert answer.status_code == want[who], answer.text[:300]


def test_cli_tokens_create_list_revoke(world: World) -> None:
    server = world.server
    made = json.loads(
        server.cli(
            "tokens",
            "create",
            "vera",
            "-t",
            "acme",
            "--name",
            "laptop",
            "--expires-in",
            "7d",
            "-o",
            "json",
        ).stdout
    )
    assert made["id"].startswith("tok_") and made["name"] == "laptop" and made["token"]
    secret_only = server.cli("tokens", "create", "vera", "-t", "acme").stdout.strip()
    assert secret_only.startswith("aip_") and "\n" not in secret_only
    mine = json.loads(server.cli("tokens", "list", "-o", "json", token=made["token"]).stdout)
    assert {t["name"] for t in mine} == {"laptop", ""} and all("token" not in t for t in mine)
    table = server.cli("tokens", "list", "-t", "acme").stdout
    assert made["id"] in table and "laptop" in table and made["token"] not in table
    revoked = server.cli("tokens", "revoke", made["id"], token=made["token"]).stdout
    assert made["id"] in revoked and "revoked" in revoked
    refused = server.cli("tokens", "list", token=made["token"], check=False)
    assert refused.returncode == EXIT_UNAUTHORISED and "revoked" in refused.stderr
