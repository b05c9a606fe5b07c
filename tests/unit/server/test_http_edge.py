"""The edge of the HTTP API: one error shape for every status (including the ones Starlette
answers itself and the unforeseen 500), the body limit before authentication on every route,
the OpenAPI document clients and fuzzers need, and /docs with no external URL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient

from aipaas.server.app import create_app
from aipaas.server.bootstrap import ensure_admin_token
from aipaas.store import Store
from tests.unit.server.api_world import ADMIN

LIMIT = 4096
AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    store = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    ensure_admin_token(store, tmp_path / "admin-token", ADMIN)
    app = create_app(store, max_body_bytes=LIMIT)

    @app.get("/test/boom", include_in_schema=False)
    def boom() -> None:
        raise RuntimeError("secret internals")

    @app.get("/test/bad", include_in_schema=False)
    def bad() -> None:
        raise HTTPException(400, "There was an error parsing the body")

    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _shape(answer: object) -> dict[str, object]:
    body = answer.json()  # type: ignore[attr-defined]
    assert set(body) == {"code", "message", "fields"}, body
    assert isinstance(body["fields"], list)
    return body  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/test/bad", 400, "BadRequest"),
        ("GET", "/api/v1/whoami", 401, "Unauthenticated"),
        ("GET", "/no/such/route", 404, "NotFound"),
        ("DELETE", "/healthz", 405, "MethodNotAllowed"),
        ("GET", "/test/boom", 500, "Internal"),
    ],
)
def test_every_status_has_the_one_shape(
    client: TestClient, method: str, path: str, status: int, code: str
) -> None:
    answer = client.request(method, path)
    assert answer.status_code == status
    assert _shape(answer)["code"] == code


def test_an_internal_error_tells_nothing_of_its_cause(client: TestClient) -> None:
    answer = client.get("/test/boom")
    assert answer.status_code == 500
    assert "secret" not in answer.text
    assert _shape(answer)["message"] == "internal server error"


def test_a_validation_error_names_the_parameter(client: TestClient) -> None:
    answer = client.get("/api/v1/jobs", params={"limit": "ten"}, headers=AUTH)
    assert answer.status_code == 422
    assert [f["path"] for f in _shape(answer)["fields"]] == ["limit"]  # type: ignore[attr-defined]


READ_BODIES = {
    ("POST", "/api/v1/apply"),
    ("POST", "/api/v1/tokens"),
    ("PUT", "/api/v1/tenants/acme"),
}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/v1/apply"),
        ("POST", "/api/v1/tokens"),
        ("PUT", "/api/v1/tenants/acme"),
        ("GET", "/api/v1/jobs"),
        ("DELETE", "/api/v1/jobs/x"),
        ("GET", "/healthz"),
        ("POST", "/nowhere"),
    ],
)
@pytest.mark.parametrize("auth", [AUTH, {}], ids=["token", "no token"])
def test_the_body_limit_comes_before_authentication_on_every_route(
    client: TestClient, method: str, path: str, auth: dict[str, str]
) -> None:
    declared = client.request(method, path, content=b"x" * (LIMIT + 1), headers=auth)
    assert declared.status_code == 413
    assert _shape(declared)["code"] == "PayloadTooLarge"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it comes
        for _ in range(4):
            yield b"y" * (LIMIT // 2)

    streamed = client.request(method, path, content=chunks(), headers=auth)
    if (method, path) in READ_BODIES and auth:
        assert streamed.status_code == 413
        _shape(streamed)
    else:  # answered without reading the body (no token, no such route): the rest is not read
        assert streamed.headers["connection"] == "close"


def _streamed_to_app(app: Any, method: str, path: str, token: str | None) -> tuple[int, int]:
    """The status of a chunked request sent straight to the ASGI app, and how many chunks the
    server asked for: an HTTP client may send a body before the answer comes, so only the
    server's own reads show whether it read the body."""
    reads = 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        return {"type": "http.request", "body": b"kind: Job\n" * 10, "more_body": reads < 3}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"transfer-encoding", b"chunked"), (b"content-type", b"application/yaml")]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("test", 1),
        "server": ("test", 80),
    }
    anyio.run(app, scope, receive, send)
    return next(m["status"] for m in sent if m["type"] == "http.response.start"), reads


@pytest.mark.parametrize(("method", "path"), [("POST", "/api/v1/apply"), ("PUT", "/api/v1/jobs/x")])
def test_the_caller_is_checked_before_a_streamed_body_is_read(
    client: TestClient, method: str, path: str
) -> None:
    for token in (None, "not-a-token"):
        assert _streamed_to_app(client.app, method, path, token) == (401, 0), token
    # With a good token the same body is read (and refused as no valid object): the count works.
    status, reads = _streamed_to_app(client.app, method, path, ADMIN)
    assert status == 422 and reads == 3


def test_a_small_apply_on_the_fast_path_still_obeys_a_small_limit(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    ensure_admin_token(store, tmp_path / "admin-token", ADMIN)
    with TestClient(create_app(store, max_body_bytes=100)) as client:
        client.get("/api/v1/whoami", headers=AUTH)  # the caller is now remembered
        body = b"apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\n" + b"#" * 200
        answer = client.post("/api/v1/apply", content=body, headers=AUTH)
        assert answer.status_code == 413


def test_openapi_declares_bearer_bodies_and_errors(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": document["components"]["securitySchemes"]["bearer"]["description"],
    }
    error = {"$ref": "#/components/schemas/Error"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            # redeeming an invitation is the one operation without a bearer token (the
            # invitation is the credential): it says so, as the fuzzer expects
            wanted: list[dict[str, list[str]]] = (
                [] if path == "/api/v1/invitations/redeem" else [{"bearer": []}]
            )
            assert operation["security"] == wanted, (method, path)
            for status in ("401", "403", "404", "413", "422"):
                content = operation["responses"][status]["content"]
                assert content["application/json"]["schema"] == error, (method, path, status)
    for path, method in (("/api/v1/apply", "post"), ("/api/v1/{plural}/{name}", "put")):
        body = document["paths"][path][method]["requestBody"]
        assert set(body["content"]) == {"application/json", "application/yaml"}
    plural = next(
        p
        for p in document["paths"]["/api/v1/{plural}"]["get"]["parameters"]
        if p["name"] == "plural"
    )
    assert {"jobs", "tenants", "queues"} <= set(plural["schema"]["enum"])


def test_openapi_declares_429_on_logs_and_405_where_a_parameter_can_hold_a_route(
    client: TestClient,
) -> None:
    document = client.get("/openapi.json").json()
    error = {"$ref": "#/components/schemas/Error"}
    logs = document["paths"]["/api/v1/jobs/{name}/logs"]["get"]["responses"]
    assert logs["429"]["content"]["application/json"]["schema"] == error
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert ("405" in operation["responses"]) == ("{" in path), (method, path)
    # What the 405 is for: a name holding a slash lands on the cancel route, POST only.
    for method in ("GET", "PUT", "DELETE"):
        answer = client.request(method, "/api/v1/jobs/x%2Fcancel", headers=AUTH)
        assert answer.status_code == 405, (method, answer.text)
        assert _shape(answer)["code"] == "MethodNotAllowed"


def test_docs_need_no_network(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    urls = re.findall(r"""(?:src|href|url)\s*[=:]\s*["']([^"']+)["']""", page.text)
    assert urls, page.text
    assert not [u for u in urls if "//" in u], urls  # every asset from this server
    assert "validatorUrl: null" in page.text
    for url in urls:
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert len(asset.content) > 100
