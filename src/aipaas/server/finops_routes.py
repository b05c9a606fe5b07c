"""FinOps routes under /api/v1: cost by any of tenant, queue, user, job, model, day, pool and
tier; a tenant's monthly statement (JSON or CSV); a tenant's price view.

    GET /api/v1/cost?since=&until=&by=tenant,queue&tenant=
        -> {"since", "until", "by": [...], "items": [{<by...>, currency, gpuHours, cpuHours,
            memoryGiBHours, cost, tasks}], "total": {CURRENCY: amount}}
    GET /api/v1/statements/{tenant}?month=YYYY-MM&format=json|csv
        -> {"tenant", "month", "since", "until", "lines": [...as items, by queue, user, model,
            pool, tier], "total": {...}}  (CSV: one line per line, then a total line per currency)
    GET /api/v1/prices?tenant=  -> {"tenant", "inForce": name | null, "items": [PriceList...]}

``since``/``until``: an RFC 3339 time, a date, or a duration back from now (``24h``, ``7d``);
by default from the start of this month to now. Everyone reads its own tenant's; another
tenant's is 404 (its existence is not revealed); a platform admin reads any, or all.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from aipaas.api.meta import Name
from aipaas.errors import NotFound
from aipaas.metering import statements
from aipaas.metering.cost import totals
from aipaas.metering.cost_ledger import cost, price_book
from aipaas.server import finops_invites
from aipaas.server.auth import principal_of
from aipaas.store import Store
from aipaas.tenancy.principal import Principal

router = APIRouter(prefix="/api/v1", tags=["finops"])
router.include_router(finops_invites.router)
Caller = Annotated[Principal, Depends(principal_of)]
TenantQuery = Annotated[str | None, Query(max_length=63, description="Tenant (admins: any)")]
TimeQuery = Annotated[
    str | None, Query(max_length=64, description="RFC 3339 time, date, or duration ago (7d)")
]


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def scope(caller: Principal, tenant: str | None) -> str | None:
    """The tenant a caller reads: its own, or (platform admins) the one named or all."""
    wanted = tenant if caller.is_platform_admin else (tenant or caller.tenant)
    if wanted is not None and not caller.sees_tenant(wanted):
        raise NotFound(f"tenant {wanted} not found")
    return wanted


@router.get("/cost", summary="Cost and usage in a window, summed by the dimensions asked")
async def cost_report(
    request: Request,
    caller: Caller,
    tenant: TenantQuery = None,
    since: TimeQuery = None,
    until: TimeQuery = None,
    by: Annotated[
        str, Query(max_length=128, description="Comma-separated: tenant,queue,user,job,model,day")
    ] = "tenant",
) -> dict[str, Any]:
    store = _store(request)
    window = statements.window(store.clock.now(), since, until)
    dims = statements.dimensions(by)
    rows = await run_in_threadpool(cost, store, scope(caller, tenant), *window, dims)
    return {
        "since": window[0].isoformat(),
        "until": window[1].isoformat(),
        "by": list(dims),
        "items": [row.wire() for row in rows],
        "total": totals(rows),
    }


@router.get(
    "/statements/{tenant}",
    summary="A tenant's monthly statement (JSON or CSV)",
    responses={
        200: {
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "text/csv": {"schema": {"type": "string"}},
            }
        }
    },
)
async def statement(
    request: Request,
    caller: Caller,
    tenant: Name,  # a name, checked: it is written into the CSV's Content-Disposition
    month: Annotated[str | None, Query(max_length=7, description="YYYY-MM; this month")] = None,
    format: Annotated[str, Query(pattern="^(json|csv)$")] = "json",
) -> Any:
    store = _store(request)
    named = scope(caller, tenant) or tenant
    body = await run_in_threadpool(statements.monthly, store, named, month)
    if format == "csv":
        return Response(
            statements.as_csv(body),
            media_type="text/csv",
            headers={"content-disposition": f'attachment; filename="{named}-{body["month"]}.csv"'},
        )
    return body


@router.get("/prices", summary="The price lists that price a tenant's use (its price view)")
async def prices(request: Request, caller: Caller, tenant: TenantQuery = None) -> dict[str, Any]:
    store = _store(request)
    named = scope(caller, tenant)
    book = await run_in_threadpool(price_book, store)
    if named is None:
        return {"tenant": None, "inForce": None, "items": [p.to_wire() for p in book.lists]}
    in_force = book.at(named, store.clock.now())
    return {
        "tenant": named,
        "inForce": in_force.name if in_force is not None else None,
        "items": [p.to_wire() for p in book.visible_to(named)],
    }
