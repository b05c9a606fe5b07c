"""The web dashboard: its page and assets (from the package, no CDN) and the one read it needs
that the API had not: allocation and usage over time (dashboard_timeline.py).

The page holds no data: it signs in with a token (kept in the browser's sessionStorage) and
reads everything through the API with it, so each tenant sees what the API lets it see.
Mounted by server/more_routes.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from aipaas.errors import NotFound
from aipaas.server.auth import principal_of
from aipaas.server.dashboard_cost import cost_timeline
from aipaas.server.dashboard_events import newest_events
from aipaas.server.dashboard_timeline import timeline
from aipaas.store import Store
from aipaas.tenancy.principal import Principal

ASSETS: Final = Path(__file__).parent / "static" / "dashboard"
# Every request the page makes goes to this server; inline scripts and styles are refused, so
# that text from the API (names, events, logs) can never run as code.
POLICY: Final = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
_HEADERS: Final = {"Content-Security-Policy": POLICY, "Cache-Control": "no-cache"}
#: The pages of the dashboard (each a view of the one page, chosen by its path).
PAGES: Final = ("cluster", "queues", "jobs", "usage", "alerts")
MAX_WINDOW: Final = 90 * 24 * 3600
MAX_POINTS: Final = 720
MAX_EVENTS: Final = 1000

router = APIRouter()
Caller = Annotated[Principal, Depends(principal_of)]


def _assets() -> dict[str, Path]:
    """The files the page may load, by their path under ASSETS: nothing else is served."""
    return {p.relative_to(ASSETS).as_posix(): p for p in ASSETS.rglob("*") if p.is_file()}


_FILES: Final = _assets()


@router.get("/", include_in_schema=False)
@router.get("/dashboard", include_in_schema=False)
@router.get("/dashboard/", include_in_schema=False)
def dashboard() -> FileResponse:
    # The page itself at each of these (no redirect): its assets are named by absolute paths.
    return FileResponse(ASSETS / "index.html", headers=_HEADERS)


@router.get("/dashboard/assets/{path:path}", include_in_schema=False)
def asset(path: str) -> FileResponse:
    found = _FILES.get(path)
    if found is None:
        raise NotFound(f"no dashboard asset {path}")
    return FileResponse(found, headers=_HEADERS)


@router.get("/dashboard/{page}", include_in_schema=False)
def dashboard_page(page: str) -> FileResponse:
    if page not in PAGES:
        raise NotFound(f"no dashboard page {page} (pages: {', '.join(PAGES)})")
    return FileResponse(ASSETS / "index.html", headers=_HEADERS)


Window = Annotated[int, Query(ge=60, le=MAX_WINDOW, description="Seconds back from now.")]
Points = Annotated[int, Query(ge=2, le=MAX_POINTS, description="Buckets the window is cut into.")]
TenantQuery = Annotated[str | None, Query(max_length=63, description="Tenant (admins)")]


def _scope(caller: Principal, tenant: str | None) -> str | None:
    """Everyone reads its own tenant's; a platform admin any tenant's or all (tenant unset)."""
    scope = tenant if caller.is_platform_admin else (tenant or caller.tenant)
    if scope is not None and not caller.sees_tenant(scope):
        raise NotFound(f"tenant {scope} not found")
    return scope


@router.get(
    "/api/v1/dashboard/timeline",
    tags=["dashboard"],
    summary="Allocated GPUs and CPUs and hours used over time, per tenant and queue",
)
async def allocation_timeline(
    request: Request,
    caller: Caller,
    tenant: TenantQuery = None,
    window: Window = 3600,
    points: Points = 60,
) -> dict[str, Any]:
    store: Store = request.app.state.store
    return await run_in_threadpool(timeline, store, _scope(caller, tenant), window, points)


@router.get(
    "/api/v1/dashboard/cost",
    tags=["dashboard"],
    summary="Cost over time (cumulative in the window), per tenant, queue and currency",
)
async def cost_over_time(
    request: Request,
    caller: Caller,
    tenant: TenantQuery = None,
    window: Window = 3600,
    points: Points = 60,
) -> dict[str, Any]:
    store: Store = request.app.state.store
    return await run_in_threadpool(cost_timeline, store, _scope(caller, tenant), window, points)


@router.get(
    "/api/v1/dashboard/events",
    tags=["dashboard"],
    summary="The newest events, newest first (warnings only with type=Warning)",
)
async def newest(
    request: Request,
    caller: Caller,
    tenant: TenantQuery = None,
    type: Annotated[Literal["Normal", "Warning"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_EVENTS)] = 100,
) -> dict[str, Any]:
    store: Store = request.app.state.store
    scope = _scope(caller, tenant)
    return {"items": await run_in_threadpool(newest_events, store, scope, type, limit)}
