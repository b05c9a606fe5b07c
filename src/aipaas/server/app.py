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
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from starlette.responses import Response

from aipaas.api.errors import field_path
from aipaas.errors import AipaasError, InvalidObject
from aipaas.metering.metrics import Metrics
from aipaas.server import routes
from aipaas.server.auth import PrincipalCache
from aipaas.store import Store

Hook = Callable[[], None]


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

    app = FastAPI(
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
        return Response(generate_latest(app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.include_router(routes.router)
    app.include_router(routes.generic)
    return app


def error_body(err: AipaasError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": err.code, "message": err.message}
    if isinstance(err, InvalidObject):
        body["fields"] = [{"path": f.path, "reason": f.reason} for f in err.fields]
    return body


async def _aipaas_error(_request: Request, err: AipaasError) -> JSONResponse:
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
