"""Streams of changes, newline-delimited JSON (one document a line, flushed as it comes):

- ``GET /api/v1/watch/events``: events as they are written, each with its ``id``; ``after``
  (an id) resumes after the last one seen.
- ``GET /api/v1/watch/{plural}``: objects as they change, ``{"type": ADDED|MODIFIED|DELETED|
  BOOKMARK|ERROR, "object": ...}``; ``resourceVersion`` (a BOOKMARK's) resumes. The rules are
  in watch_stream.py.

Both end after ``timeoutSeconds`` (clients reconnect with their cursor) and when the caller's
token stops being valid; a process serves at most MAX_STREAMS at once (then 429). A caller
sees what the lists show it: its own tenant's only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from aipaas.api.registry import KINDS, resolve_kind
from aipaas.errors import AipaasError, InvalidObject, NotFound, TooManyRequests
from aipaas.server.auth import authenticate, principal_cache
from aipaas.server.service import ObjectService
from aipaas.server.watch_stream import ObjectWatch, bookmark, decode_cursor, encode_cursor
from aipaas.store import Store, changes
from aipaas.tenancy.principal import Principal

router = APIRouter(prefix="/api/v1")
POLL_SECONDS = 0.5  # how often a stream reads; app.state.watch_poll_seconds overrides it
HEARTBEAT_SECONDS = 15.0  # a bookmark at least this often: idle proxies keep the stream
MAX_TIMEOUT = 3600
MAX_STREAMS = 256  # open streams in one process; app.state.watch_max_streams overrides it
# One caller's share of them (app.state.watch_max_streams_per_caller overrides it): a member
# of one tenant opening streams until the bound must not shut every other tenant out.
MAX_STREAMS_PER_CALLER = 32
TenantQuery = Annotated[str | None, Query(max_length=63, description="Tenant (admins)")]
TimeoutQuery = Annotated[
    int,
    Query(alias="timeoutSeconds", ge=1, le=MAX_TIMEOUT, description="The stream ends then."),
]
MEDIA_TYPE = "application/x-ndjson"


def _line(document: Any) -> bytes:
    return (json.dumps(document, separators=(",", ":")) + "\n").encode()


def _poll(request: Request) -> float:
    return float(getattr(request.app.state, "watch_poll_seconds", POLL_SECONDS))


def _caller_check(request: Request) -> Callable[[], Principal]:
    """Authenticates the request's token again (through the process's cache) at each read."""
    store: Store = request.app.state.store
    header = request.headers.get("authorization")
    cache = principal_cache(request)
    return lambda: authenticate(store, header, cache)


class _Streams:
    """How many streams this process serves now: past the bound a new one is refused (429)
    before it starts. Counted from the first line sent to the stream's end, so that a stream
    that never starts holds nothing."""

    def __init__(self) -> None:
        self.open = 0
        self.by_caller: dict[tuple[str, str], int] = {}

    def admit(self, request: Request, caller: Principal) -> tuple[str, str]:
        """The caller's key, if it has streams to spare (else 429)."""
        state = request.app.state
        bound = int(getattr(state, "watch_max_streams_per_caller", MAX_STREAMS_PER_CALLER))
        key = (caller.tenant or "", caller.user)
        if self.by_caller.get(key, 0) >= bound:
            raise TooManyRequests(f"{caller.user} has {bound} watch streams open; close one")
        return key


def _streams(request: Request) -> _Streams:
    state = request.app.state
    streams: _Streams | None = getattr(state, "watch_streams", None)
    if streams is None:
        streams = _Streams()
        state.watch_streams = streams
    bound = int(getattr(state, "watch_max_streams", MAX_STREAMS))
    if streams.open >= bound:
        raise TooManyRequests(f"this server is serving {bound} watch streams; try again later")
    return streams


async def _counted(
    streams: _Streams, key: tuple[str, str], lines: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    streams.open += 1
    streams.by_caller[key] = streams.by_caller.get(key, 0) + 1
    try:
        async for line in lines:
            yield line
    finally:
        streams.open -= 1
        left = streams.by_caller[key] - 1
        if left:
            streams.by_caller[key] = left
        else:
            del streams.by_caller[key]


def _error_line(err: AipaasError) -> bytes:
    return _line({"type": "ERROR", "object": {"code": err.code, "message": err.message}})


# Out of the OpenAPI document: a stream that runs until its timeout is not a request/answer
# operation (and a fuzzer's request would hang there); README.md and this docstring describe it.
@router.get("/watch/events", include_in_schema=False)
async def watch_events(
    request: Request,
    tenant: TenantQuery = None,
    kind: Annotated[str | None, Query(max_length=32)] = None,
    name: Annotated[str | None, Query(max_length=63)] = None,
    after: Annotated[int, Query(ge=0, description="Only events with a greater id.")] = 0,
    timeout_seconds: TimeoutQuery = 300,
) -> StreamingResponse:
    store: Store = request.app.state.store
    streams = _streams(request)
    who = _caller_check(request)
    caller = await run_in_threadpool(who)
    key = streams.admit(request, caller)
    resolved = resolve_kind(kind) if kind else None
    scope = tenant if caller.is_platform_admin else (tenant or caller.tenant)
    if scope is not None and not caller.sees_tenant(scope):
        raise NotFound(f"tenant {scope} not found")
    tenants = None if scope is None else [scope]

    def read(last: int) -> list[changes.NumberedEvent]:
        who()  # a revoked token ends the stream
        return changes.events_after(store, last, tenants=tenants, kind=resolved, name=name)

    first = await run_in_threadpool(read, after)

    async def lines() -> AsyncIterator[bytes]:
        last = after
        batch = first
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        while True:
            for event in batch:
                last = event.id
                yield _line(event.to_wire())
            if loop.time() >= deadline or await request.is_disconnected():
                return
            await asyncio.sleep(_poll(request))
            try:
                batch = await run_in_threadpool(read, last)
            except AipaasError as err:
                yield _error_line(err)
                return

    return StreamingResponse(_counted(streams, key, lines()), media_type=MEDIA_TYPE)


@router.get("/watch/{plural}", include_in_schema=False)
async def watch_objects(
    plural: str,
    request: Request,
    tenant: TenantQuery = None,
    name: Annotated[str | None, Query(max_length=63, description="One object only.")] = None,
    resource_version: Annotated[
        str | None,
        Query(alias="resourceVersion", max_length=64, description="A BOOKMARK's: resume."),
    ] = None,
    timeout_seconds: TimeoutQuery = 300,
) -> StreamingResponse:
    try:
        kind = resolve_kind(plural)
    except InvalidObject as err:
        raise NotFound(f"unknown kind {plural!r}; known kinds: {', '.join(KINDS)}") from err
    store: Store = request.app.state.store
    streams = _streams(request)
    who = _caller_check(request)
    cache = principal_cache(request)
    resume = decode_cursor(resource_version) if resource_version else None
    key = streams.admit(request, await run_in_threadpool(who))

    def service() -> ObjectService:
        return ObjectService(store, who(), identity_changed=cache.forget_all)

    watch = ObjectWatch(service, kind, tenant, name)
    # The first read before the answer starts: a wrong kind, tenant or token is an HTTP error.
    first, _ = await run_in_threadpool(watch.start, store.clock.now(), resume)

    def step() -> list[Any]:
        now = store.clock.now()
        found = watch.next()
        return [*found, bookmark(encode_cursor(now))] if found else []

    async def lines() -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        for document in first:
            yield _line(document)
        quiet_since = loop.time()
        while loop.time() < deadline:
            await asyncio.sleep(_poll(request))
            if await request.is_disconnected():
                return
            try:
                found = await run_in_threadpool(step)
            except AipaasError as err:
                yield _error_line(err)
                return
            if not found and loop.time() - quiet_since >= HEARTBEAT_SECONDS:
                found = [bookmark(encode_cursor(store.clock.now()))]
            if found:
                quiet_since = loop.time()
            for document in found:
                yield _line(document)

    return StreamingResponse(_counted(streams, key, lines()), media_type=MEDIA_TYPE)
