"""The FastAPI application: routes are thin; rules live in service.py, data in the store.

Who calls it: cli/control_server.py builds the store, the controller and this app, and hands
the controller's start/stop to ``create_app`` as lifespan hooks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from aipaas.api.errors import field_path
from aipaas.errors import AipaasError, InvalidObject
from aipaas.metering.metrics import Metrics
from aipaas.server import routes
from aipaas.server.auth import PrincipalCache, remembered
from aipaas.store import Store

Hook = Callable[[], None]
APPLY_PATH = "/api/v1/apply"


def create_app(
    store: Store,
    *,
    metrics: Metrics | None = None,
    on_start: Hook | None = None,
    on_stop: Hook | None = None,
    is_ready: Callable[[], bool] | None = None,
    max_body_bytes: int = 1 << 20,
) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if on_start:
            on_start()
        try:
            yield
        finally:
            if on_stop:
                on_stop()

    app = _Application(
        title="aipaas",
        version="v1",
        description="A shared, multi-tenant service for AI work on a pool of GPU machines.",
        lifespan=lifespan,
    )
    app.state.store = store
    app.state.metrics = metrics or Metrics()
    app.state.max_body_bytes = max_body_bytes
    app.state.principals = PrincipalCache()

    app.add_exception_handler(AipaasError, _aipaas_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _request_invalid)  # type: ignore[arg-type]

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    def readyz() -> Response:
        try:
            with store.transaction(write=False) as conn:
                conn.execute(text("SELECT 1"))
        except Exception as err:
            return JSONResponse({"status": "database unavailable", "error": str(err)}, 503)
        if is_ready is not None and not is_ready():
            return JSONResponse({"status": "controller starting"}, 503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", include_in_schema=False)
    def prometheus() -> Response:
        return Response(app.state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    app.include_router(routes.router)
    app.include_router(routes.generic)
    return app


def error_body(err: AipaasError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": err.code, "message": err.message}
    if isinstance(err, InvalidObject):
        body["fields"] = [{"path": f.path, "reason": f.reason} for f in err.fields]
    return body


async def _aipaas_error(_request: Request | None, err: AipaasError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if err.http_status == 401 else None
    return JSONResponse(error_body(err), status_code=err.http_status, headers=headers)


async def _request_invalid(_request: Request, err: RequestValidationError) -> JSONResponse:
    fields = [
        {
            "path": field_path([p for p in e["loc"] if p not in ("query", "path", "body")]),
            "reason": e["msg"],
        }
        for e in err.errors()
    ]
    message = "; ".join(f"{f['path']}: {f['reason']}" for f in fields)
    return JSONResponse({"code": "Invalid", "message": message, "fields": fields}, 422)


class _Application(FastAPI):
    """FastAPI, with one request answered before its middleware and router: a small
    ``POST /api/v1/apply`` by a caller this process remembers (see ``_apply_fast``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] == APPLY_PATH
            and await _apply_fast(self, scope, receive, send)
        ):
            return
        await super().__call__(scope, receive, send)


async def _apply_fast(app: FastAPI, scope: Scope, receive: Receive, send: Send) -> bool:
    """Answer a small submission by a remembered caller, as the apply route would; False, and
    nothing read, for any other (the route answers it: token lookups, big bodies, bad headers).

    Submissions come by the thousand: the eight layers of middleware and routing in front of
    the route cost as much as validating the submission and more than storing it.
    """
    headers = Headers(scope=scope)
    length = headers.get("content-length", "")
    if not length.isdigit() or int(length) > routes.SMALL_BODY_BYTES:
        return False
    try:
        caller = remembered(headers.get("authorization"), app.state.principals)
    except AipaasError:
        return False
    if caller is None:
        return False
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return True  # the client left: there is no one to answer
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    try:
        results = await routes.apply_small(
            app.state.store, caller, app.state.principals, bytes(body)
        )
        response = routes.applied_response(results)
    except AipaasError as err:
        response = await _aipaas_error(None, err)
    await response(scope, receive, send)
    return True
