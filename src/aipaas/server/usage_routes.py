"""Usage routes under /api/v1/usage: the report, the ledger's entries, corrections.

The report sums the ledger (store/ledger.py) and the attempts running now; everyone reads its
own tenant's (a platform admin any or all). Only a platform admin corrects, and a correction is
an entry of its own that names the entry it corrects and why; nothing is ever removed.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Query, Request
from pydantic import Field, ValidationError, field_validator
from starlette.concurrency import run_in_threadpool

from aipaas.api.errors import invalid
from aipaas.api.meta import Model
from aipaas.api.parsing import load_json
from aipaas.errors import FieldError, Forbidden, InvalidObject, NotFound
from aipaas.metering.usage import report
from aipaas.server import reads
from aipaas.server.auth import authenticate, principal_cache, principal_of
from aipaas.server.body_limit import read_body
from aipaas.store import Store
from aipaas.store.ledger import CORRECTION, LedgerEntry, add_correction, entries_page
from aipaas.tenancy.principal import Principal

# Included by routes.router (under /api/v1).
router = APIRouter(tags=["usage"])
Caller = Annotated[Principal, Depends(principal_of)]
TenantQuery = Annotated[str | None, Query(max_length=63, description="Tenant (admins)")]
MAX_CORRECTION_BYTES: Final = 4096
# A correction moves at most this many hours of each kind (a year of a thousand GPUs).
MAX_CORRECTION_HOURS: Final = 1000 * 24 * 366


class Correction(Model):
    """A correction of ledger entry ``corrects``: hours to add (negative: to take away)."""

    corrects: int = Field(ge=1, le=2**31 - 1, strict=True, description="The entry corrected.")
    reason: str = Field(min_length=1, max_length=1024, description="Why; kept with the entry.")
    gpu_hours: float = Field(default=0, ge=-MAX_CORRECTION_HOURS, le=MAX_CORRECTION_HOURS)
    cpu_hours: float = Field(default=0, ge=-MAX_CORRECTION_HOURS, le=MAX_CORRECTION_HOURS)
    memory_gib_hours: float = Field(
        default=0, ge=-MAX_CORRECTION_HOURS, le=MAX_CORRECTION_HOURS, alias="memoryGiBHours"
    )

    @field_validator("gpu_hours", "cpu_hours", "memory_gib_hours")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @field_validator("reason")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.strip() or any(ord(c) < 32 and c not in "\t\n" for c in value):
            raise ValueError("must be printable text, not blank")
        return value


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def _scope(caller: Principal, tenant: str | None) -> str | None:
    scope = tenant if caller.is_platform_admin else (tenant or caller.tenant)
    if scope is not None and not caller.sees_tenant(scope):
        raise NotFound(f"tenant {scope} not found")
    return scope


@router.get("/usage", summary="GPU-, CPU- and memory-hours by tenant, queue, user and GPU model")
def usage_report(request: Request, caller: Caller, tenant: TenantQuery = None) -> dict[str, Any]:
    rows = report(_store(request), _scope(caller, tenant))
    return {
        "items": [
            {
                "tenant": r.tenant,
                "queue": r.queue,
                "user": r.user,
                "gpuModel": r.gpu_model,
                "gpuHours": r.gpu_hours,
                "cpuHours": r.cpu_hours,
                "memoryGiBHours": r.memory_gib_hours,
                "tasks": r.tasks,
            }
            for r in rows
        ]
    }


@router.get("/usage/entries", summary="A page of the usage ledger, oldest first; see continue")
def usage_entries(
    request: Request,
    caller: Caller,
    tenant: TenantQuery = None,
    limit: Annotated[
        int, Query(ge=1, le=reads.MAX_LIMIT, description="Most entries in one answer (a page).")
    ] = reads.DEFAULT_LIMIT,
    continue_: Annotated[
        str | None,
        Query(
            alias="continue",
            max_length=1000,
            description="metadata.continue of the previous page: the next page.",
        ),
    ] = None,
    after: Annotated[
        int | None,
        Query(ge=0, le=2**31 - 1, description="Entries after this id (instead of continue)."),
    ] = None,
) -> dict[str, Any]:
    if continue_ and after is not None:
        raise InvalidObject([FieldError("after", "give continue or after, not both")])
    start = reads.decode_continue(continue_) if continue_ else (after or 0)
    page = entries_page(_store(request), _scope(caller, tenant), after=start, limit=limit)
    return {
        "metadata": reads.list_metadata(page),
        "items": [entry_view(e) for e in page.items],
    }


@router.post(
    "/usage/corrections",
    status_code=201,
    summary="Correct a usage entry (platform admins): a new entry that names it",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": Correction.model_json_schema(by_alias=True)}
            },
        }
    },
)
async def correct_usage(request: Request) -> dict[str, Any]:
    store = _store(request)
    header = request.headers.get("authorization")
    caller = await run_in_threadpool(authenticate, store, header, principal_cache(request))
    if not caller.is_platform_admin:
        raise Forbidden("only a platform admin may correct usage")
    body = await read_body(request, MAX_CORRECTION_BYTES)
    # Parsed as every JSON body is (api/parsing.py): a key given twice is refused, not the
    # last silently kept.
    try:
        data = load_json(body.decode("utf-8")) if body.strip() else None
    except UnicodeDecodeError as err:
        raise InvalidObject([FieldError("", f"not UTF-8: {err}")]) from err
    try:
        wanted = Correction.model_validate(data)
    except ValidationError as err:
        raise invalid(err, what="usage correction") from err
    now = store.clock.now()
    correction = LedgerEntry(
        kind=CORRECTION,
        tenant="",
        queue="",
        user="",
        job_name="",
        job_uid="",
        task="",
        attempt=0,
        gpu_model="",
        gpu_milli=0,
        cpu_milli=0,
        memory_mib=0,
        started_at=None,
        ended_at=None,
        gpu_hours=wanted.gpu_hours,
        cpu_hours=wanted.cpu_hours,
        memory_gib_hours=wanted.memory_gib_hours,
        recorded_by=caller.user,
        recorded_at=now,
        corrects=wanted.corrects,
        reason=wanted.reason,
    )
    stored = await run_in_threadpool(add_correction, store, correction)
    return entry_view(stored)


def entry_view(entry: LedgerEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "kind": entry.kind,
        "tenant": entry.tenant,
        "queue": entry.queue,
        "user": entry.user,
        "job": entry.job_name,
        "jobUid": entry.job_uid,
        "task": entry.task,
        "attempt": entry.attempt,
        "gpuModel": entry.gpu_model,
        "gpus": entry.gpu_milli / 1000,
        "cpu": entry.cpu_milli / 1000,
        "memoryMiB": entry.memory_mib,
        "startedAt": entry.started_at.isoformat() if entry.started_at else None,
        "endedAt": entry.ended_at.isoformat() if entry.ended_at else None,
        "gpuHours": entry.gpu_hours,
        "cpuHours": entry.cpu_hours,
        "memoryGiBHours": entry.memory_gib_hours,
        "corrects": entry.corrects,
        "reason": entry.reason,
        "recordedBy": entry.recorded_by,
        "recordedAt": entry.recorded_at.isoformat(),
    }
