"""GET /api/v1/lending: lent GPUs as metered, for both sides (metering/lending_report.py).

Each line is one borrower's spot GPU-hours on one lending pool, what it is charged at the
pool's spot price and what the lender is credited. A platform admin sees every line; anyone
else only the lines of their own tenant, as lender or as borrower, and only its balance.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from aipaas.autoscale.lending import balances
from aipaas.metering.lending_report import lending_report
from aipaas.server.auth import principal_of
from aipaas.store import Store
from aipaas.tenancy.principal import Principal

router = APIRouter(prefix="/api/v1", tags=["lending"])
Caller = Annotated[Principal, Depends(principal_of)]


@router.get("/lending", summary="Spot GPU-hours on lending pools: charged and credited")
async def lending(request: Request, caller: Caller) -> dict[str, Any]:
    store: Store = request.app.state.store
    lines = await run_in_threadpool(lending_report, store)
    if not caller.is_platform_admin:
        mine = caller.tenant
        lines = [line for line in lines if mine in (line.lender, line.borrower)]
    owed = balances(lines)
    if not caller.is_platform_admin:
        owed = {caller.tenant: owed.get(caller.tenant, 0.0)}
    return {
        "items": [
            {
                "pool": line.pool,
                "lender": line.lender,
                "borrower": line.borrower,
                "gpuHours": line.gpu_hours,
                "spotPricePerGpuHour": line.price_per_gpu_hour,
                "amount": line.amount,
            }
            for line in lines
        ],
        "balances": owed,
    }
