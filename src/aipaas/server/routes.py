"""REST routes under /api/v1: objects by plural kind, apply, cancel, logs, events (tokens:
token_routes.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from aipaas.api.job import Job, JobPhase
from aipaas.api.meta import Object
from aipaas.api.registry import KINDS, resolve_kind
from aipaas.errors import InvalidObject, NotFound
from aipaas.server import exec_routes, exec_session, logs, reads, usage_routes, workdir_routes
from aipaas.server.auth import (
    PrincipalCache,
    authenticate,
    principal_cache,
    principal_of,
    remembered,
)
from aipaas.server.body_limit import read_body
from aipaas.server.devices import device_listing
from aipaas.server.log_watch import JobLogs
from aipaas.server.service import Applied, ObjectService
from aipaas.server.strategies import shown
from aipaas.store import Store, TaskRepository
from aipaas.store.followed import followed_jobs
from aipaas.tenancy.principal import Principal

router = APIRouter(prefix="/api/v1")
# Routes by plural kind go last so that /events, /tokens and /whoami win over /{plural}.
generic = APIRouter(prefix="/api/v1")
Caller = Annotated[Principal, Depends(principal_of)]
# Bodies up to this size are parsed on the event loop; larger ones in the thread pool.
SMALL_BODY_BYTES = 16 * 1024
TenantQuery = Annotated[str | None, Query(max_length=63, description="Tenant (admins)")]
LimitQuery = Annotated[
    int, Query(ge=1, le=reads.MAX_LIMIT, description="Most items in one answer (a page).")
]
ContinueQuery = Annotated[
    str | None,
    Query(
        alias="continue",
        max_length=1000,
        description="metadata.continue of the previous page: the next page.",
    ),
]


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def _service(request: Request, caller: Principal) -> ObjectService:
    return _service_of(_store(request), caller, principal_cache(request))


def _service_of(store: Store, caller: Principal, cache: PrincipalCache) -> ObjectService:
    """The caller's service; a write to a user or tenant makes this process forget callers."""
    return ObjectService(store, caller, identity_changed=cache.forget_all)


def _kind(plural: str) -> str:
    try:
        return resolve_kind(plural)
    except InvalidObject as err:
        raise NotFound(f"unknown kind {plural!r}; known kinds: {', '.join(KINDS)}") from err


@router.get("/whoami")
def whoami(caller: Caller) -> dict[str, str]:
    return {"user": caller.user, "tenant": caller.tenant, "role": caller.role.value}


@router.post(
    "/apply",
    summary="Create or update the objects of a YAML or JSON body",
    response_class=JSONResponse,
)
async def apply(request: Request) -> Response:
    store = _store(request)
    header = request.headers.get("authorization")
    cache = principal_cache(request)
    # The caller first, then the body: no one without a token has the server read a megabyte.
    # A remembered caller costs no thread; a token lookup (the database) runs in the pool.
    caller = remembered(header, cache)
    if caller is None:
        caller = await run_in_threadpool(authenticate, store, header, cache)
    body = await read_body(request, request.app.state.max_body_bytes)
    if len(body) > SMALL_BODY_BYTES:
        service = _service_of(store, caller, cache)
        return applied_response(await run_in_threadpool(service.apply_text, body))
    return applied_response(await apply_small(store, caller, cache, body))


async def apply_small(
    store: Store, caller: Principal, cache: PrincipalCache, body: bytes
) -> list[Applied]:
    """The hot path, a small submission by a known caller: validated on the event loop (well
    under a millisecond) and committed with others while the coroutine waits, no thread held."""
    service = _service_of(store, caller, cache)
    return [await service.apply_async(obj) for obj in service.prepare_text(body)]


def applied_response(results: list[Applied]) -> Response:
    # Each object is serialised by pydantic's core straight to JSON and the answer is put
    # together around it: no intermediate dicts for FastAPI or json.dumps to walk again.
    # A Secret's values are not written back (answers end up in terminals and logs).
    items = ",".join(
        f'{{"action":{json.dumps(r.action)},"kind":{json.dumps(r.object.kind)},'
        f'"name":{json.dumps(r.object.name)},"object":{shown(r.object).to_wire_json()}}}'
        for r in results
    )
    return Response(f'{{"items":[{items}]}}', media_type="application/json")


@generic.get("/{plural}", summary="A page of objects of a kind; follow metadata.continue")
def list_objects(
    plural: str,
    request: Request,
    caller: Caller,
    tenant: TenantQuery = None,
    limit: LimitQuery = reads.DEFAULT_LIMIT,
    continue_: ContinueQuery = None,
) -> dict[str, Any]:
    kind = _kind(plural)
    after = reads.decode_continue(continue_)
    page = _service(request, caller).list_page(kind, tenant, limit=limit, after=after)
    return {
        "kind": f"{kind}List",
        "metadata": reads.list_metadata(page),
        "items": [item.to_wire() for item in page.items],
    }


@generic.get("/{plural}/{name}")
def get_object(
    plural: str, name: str, request: Request, caller: Caller, tenant: TenantQuery = None
) -> dict[str, Any]:
    obj = _service(request, caller).get(_kind(plural), name, tenant)
    return obj.to_wire()


@generic.put("/{plural}/{name}", summary="Replace one object (resourceVersion required)")
async def replace_object(plural: str, name: str, request: Request) -> dict[str, Any]:
    store = _store(request)
    header = request.headers.get("authorization")
    cache = principal_cache(request)
    kind = _kind(plural)
    # The caller first (in the pool: a token lookup reads the database), then the body.
    caller = await run_in_threadpool(authenticate, store, header, cache)
    body = await read_body(request, request.app.state.max_body_bytes)
    replaced: Object = await run_in_threadpool(
        _service_of(store, caller, cache).replace, kind, name, body
    )
    return shown(replaced).to_wire()


@generic.delete("/{plural}/{name}")
def delete_object(
    plural: str, name: str, request: Request, caller: Caller, tenant: TenantQuery = None
) -> dict[str, str]:
    message = _service(request, caller).delete(_kind(plural), name, tenant)
    return {"message": message}


@router.post("/jobs/{name}/cancel")
def cancel_job(
    name: str, request: Request, caller: Caller, tenant: TenantQuery = None
) -> dict[str, Any]:
    job = _service(request, caller).cancel(name, tenant)
    return job.to_wire()


@router.get("/jobs/{name}/logs", summary="Task logs, by range (tail, since, limitBytes)")
async def job_logs(
    name: str,
    request: Request,
    caller: Caller,
    tenant: TenantQuery = None,
    task: Annotated[str | None, Query(max_length=80)] = None,
    follow: bool = False,
    tail: Annotated[
        int | None, Query(ge=0, le=1_000_000, description="The last lines of each task.")
    ] = None,
    since_seconds: Annotated[
        int | None,
        Query(
            alias="sinceSeconds",
            ge=1,
            le=10 * 365 * 24 * 3600,
            description="Only tasks whose log was written in the last so many seconds.",
        ),
    ] = None,
    limit_bytes: Annotated[
        int | None,
        Query(
            alias="limitBytes",
            ge=1,
            le=1 << 40,
            description="Most bytes (capped by the server's).",
        ),
    ] = None,
) -> StreamingResponse:
    store = _store(request)
    service = _service(request, caller)
    job = await run_in_threadpool(service.get, "Job", name, tenant)
    assert isinstance(job, Job)
    if task is not None and task not in _task_names(job):
        raise NotFound(f"job {name} has no task {task} (tasks: {', '.join(_task_names(job))})")
    cap = reads.limits_of(request).log_max_bytes
    window = logs.LogRange(
        limit_bytes=min(limit_bytes or cap, cap),
        tail=tail,
        since=None
        if since_seconds is None
        else store.clock.now() - timedelta(seconds=since_seconds),
    )
    uid = job.metadata.uid or ""
    if follow:
        read_jobs = partial(_followed, store)
        watch = reads.log_watch(request, read_jobs)
        state = (await run_in_threadpool(read_jobs, [uid])).get(uid, JobLogs((), True))
        who = (caller.tenant or "", caller.user)
        follower = watch.join(uid, task, window, state, caller=who, tenant=job.tenant)
        return StreamingResponse(watch.stream(follower), media_type="text/plain")
    records = await run_in_threadpool(TaskRepository(store).for_job, uid)
    chosen = [r for r in records if task is None or r.name == task]
    return StreamingResponse(logs.read(chosen, window), media_type="text/plain")


def _followed(store: Store, uids: Sequence[str]) -> dict[str, JobLogs]:
    """The log watcher's one read for all followers: the jobs' tasks and whether each is done."""
    return {
        uid: JobLogs(job.tasks, job.phase in _FINISHED)
        for uid, job in followed_jobs(store, uids).items()
    }


_FINISHED = frozenset(phase.value for phase in JobPhase if phase.finished)


def _task_names(job: Job) -> list[str]:
    return [f"{t.name}-{i}" for t in job.spec.tasks for i in range(t.replicas)]


@router.get("/events", summary="A page of events, oldest first; follow metadata.continue")
def list_events(
    request: Request,
    caller: Caller,
    tenant: TenantQuery = None,
    kind: Annotated[str | None, Query(max_length=32)] = None,
    name: Annotated[str | None, Query(max_length=63)] = None,
    limit: LimitQuery = reads.DEFAULT_LIMIT,
    continue_: ContinueQuery = None,
) -> dict[str, Any]:
    after = reads.decode_continue(continue_)
    store = _store(request)
    resolved = resolve_kind(kind) if kind else None
    scope = tenant if caller.is_platform_admin else (tenant or caller.tenant)
    if scope is not None and not caller.sees_tenant(scope):
        raise NotFound(f"tenant {scope} not found")
    uid = None
    if resolved and name:
        obj = _service(request, caller).get(resolved, name, tenant)
        uid = obj.metadata.uid
        scope = obj.tenant
    page = store.events.events_page(
        tenant=scope, kind=resolved, name=name, uid=uid, limit=limit, after=after
    )
    return {
        "metadata": reads.list_metadata(page),
        "items": [event.model_dump(mode="json") for event in page.items],
    }


@router.get("/devices", summary="Published devices, their attributes and who holds them")
def list_devices(
    request: Request,
    caller: Caller,
    limit: LimitQuery = reads.DEFAULT_LIMIT,
    continue_: ContinueQuery = None,
) -> dict[str, Any]:
    # The listing is computed whole (holders need every claim); pages bound the answer.
    after = reads.decode_continue_key(continue_)
    rows = sorted(device_listing(_store(request), caller), key=_device_key)
    rest = rows if after is None else [r for r in rows if _device_key(r) > after]
    page = rest[:limit]
    metadata: dict[str, Any] = {}
    if len(rest) > limit:
        metadata = {
            "continue": reads.encode_continue_key(_device_key(page[-1])),
            "remainingItemCount": len(rest) - limit,
        }
    return {"metadata": metadata, "items": page}


def _device_key(row: dict[str, Any]) -> list[str]:
    return [str(row["node"]), str(row["driver"]), str(row["pool"]), str(row["device"])]


# GPU-, CPU- and memory-hours: the report, the ledger, corrections (usage_routes.py).
router.include_router(usage_routes.router)
router.include_router(workdir_routes.router)  # uploaded workdirs (workdir_routes.py)
router.include_router(exec_routes.router)  # a command in a running task (exec_routes.py)
router.include_router(exec_session.router)  # an interactive session in one (exec_session.py)
