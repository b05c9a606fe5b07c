"""The FastAPI application: routes are thin; rules live in service.py, data in the store.

Who calls it: cli/control_server.py builds the store, the controller and this app, and hands
the controller's start/stop to ``create_app`` as lifespan hooks.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from aipaas.errors import AipaasError
from aipaas.metering.metrics import Metrics
from aipaas.server import http_errors, more_routes, openapi, routes, token_routes
from aipaas.server.auth import PrincipalCache, metrics_reader, remembered
from aipaas.server.body_limit import limit_body
from aipaas.server.exec_routes import TaskExecutor
from aipaas.server.exec_session import SessionOpener
from aipaas.store import Store
from aipaas.store.health import WriteProbe

Hook = Callable[[], None]
_log = logging.getLogger(__name__)
APPLY_PATH = "/api/v1/apply"
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def create_app(
    store: Store,
    *,
    metrics: Metrics | None = None,
    on_start: Hook | None = None,
    on_stop: Hook | None = None,
    is_ready: Callable[[], bool] | None = None,
    max_body_bytes: int = 1 << 20,
    metrics_public: bool = False,
    on_write: Hook | None = None,
    on_request: Hook | None = None,
    write_probe: WriteProbe | None = None,
    task_exec: TaskExecutor | None = None,
    task_session: SessionOpener | None = None,
) -> FastAPI:
    """``on_write``: called after each request that may have written (any method but GET,
    HEAD and OPTIONS), answered or refused: the process's controller acts on it at once
    rather than at its next cycle (cli/control_runtime.py passes ``ControllerLoop.wake``).
    ``on_request``: called as each HTTP request comes in (``ControllerLoop.saw_request``: the
    controller yields time to the API only while it has callers).
    ``write_probe``: /readyz also asks whether the store can write (store/health.py: the
    database disk's free space, a small write every few seconds). ``task_exec``: runs a
    command in a running task through this process's backend (server/exec_routes.py);
    ``task_session`` opens an interactive one (server/exec_session.py)."""

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
        docs_url=None,  # openapi.install serves /docs from local files
        redoc_url=None,
    )
    app.state.store = store
    app.state.metrics = metrics or Metrics()
    app.state.max_body_bytes = max_body_bytes
    app.state.on_write = on_write
    app.state.on_request = on_request
    app.state.principals = PrincipalCache()
    app.state.task_exec = task_exec
    app.state.task_session = task_session

    http_errors.install(app)
    openapi.install(app)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    def readyz() -> Response:
        # Ready or not, nothing more: the cause goes to the server's log, not to the caller.
        try:
            store.ping()
        except Exception:
            _log.warning("not ready: the database does not answer", exc_info=True)
            return JSONResponse({"status": "not ready"}, 503)
        if write_probe is not None:
            probe = write_probe.check()
            if not probe.ok:
                _log.warning("not ready: %s", probe.why)
                return JSONResponse({"status": "not ready"}, 503)
        if is_ready is not None and not is_ready():
            return JSONResponse({"status": "not ready"}, 503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", include_in_schema=False)
    def prometheus(request: Request) -> Response:
        # Metrics name every tenant and queue: a metrics reader's or a platform admin's token,
        # unless the operator made them public (Settings.metrics_public).
        if not metrics_public:
            metrics_reader(store, request.headers.get("authorization"), app.state.principals)
        return Response(app.state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    app.include_router(routes.router)
    app.include_router(token_routes.router)
    for router in more_routes.routers():
        app.include_router(router)
    app.include_router(routes.generic)
    return app


class _Application(FastAPI):
    """FastAPI, with one request answered before its middleware and router: a small
    ``POST /api/v1/apply`` by a caller this process remembers (see ``_apply_fast``); every
    other request goes through the body limit first (body_limit.py)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        on_request = self.state.on_request
        if on_request is not None:
            on_request()
        try:
            if (
                scope["method"] == "POST"
                and scope["path"] == APPLY_PATH
                and await _apply_fast(self, scope, receive, send)
            ):
                return
            await limit_body(super().__call__, self.state.max_body_bytes, scope, receive, send)
        finally:
            on_write = self.state.on_write
            if on_write is not None and scope["method"] not in _READ_METHODS:
                on_write()


async def _apply_fast(app: FastAPI, scope: Scope, receive: Receive, send: Send) -> bool:
    """Answer a small submission by a remembered caller, as the apply route would; False, and
    nothing read, for any other (the route answers it: token lookups, big bodies, bad headers).

    Submissions come by the thousand: the eight layers of middleware and routing in front of
    the route cost as much as validating the submission and more than storing it.
    """
    headers = Headers(scope=scope)
    length = headers.get("content-length", "")
    # A declared length, within the body limit: the server reads no more than that.
    if not length.isdigit() or int(length) > min(routes.SMALL_BODY_BYTES, app.state.max_body_bytes):
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
        response = await http_errors.aipaas_error(None, err)
    except Exception as err:  # the route's catch-all does not reach this path: the same here
        response = http_errors.internal(f"POST {APPLY_PATH}", err)
    await response(scope, receive, send)
    return True
