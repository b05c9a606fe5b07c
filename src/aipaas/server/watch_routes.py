"""Streams of changes, newline-delimited JSON (one document a line, flushed as it comes):

- ``GET /api/v1/watch/events``: events as they are written, each with its ``id``; ``after``
  (an id) resumes after the last one seen.
- ``GET /api/v1/watch/{plural}``: objects as they change, ``{"type": ADDED|MODIFIED|DELETED|
  BOOKMARK|ERROR, "object": ...}``; ``resourceVersion`` (a BOOKMARK's) resumes. The rules are
  in watch_stream.py.

Both end after ``timeoutSeconds`` (clients reconnect with their cursor) and when the caller's
token stops being valid; a process serves at most MAX_STREAMS at once, one caller at most
MAX_STREAMS_PER_CALLER and one tenant at most MAX_STREAMS_PER_TENANT of them (then 429),
counted from the moment a stream is admitted, so streams opened all at once count too. A
caller sees what the lists show it: its own tenant's only. Object streams read no lists after
their first: they take the process's change feed (server/watch_feed.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from aipaas.api.registry import KINDS, resolve_kind
from aipaas.errors import AipaasError, InvalidObject, NotFound, TooManyRequests
from aipaas.server.auth import authenticate, principal_cache
from aipaas.server.service import ObjectService
from aipaas.server.watch_feed import Batch, ChangeFeed, Lagging
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
# One tenant's share (app.state.watch_max_streams_per_tenant overrides it): its many users
# together must not shut every other tenant out either.
MAX_STREAMS_PER_TENANT = 64
# An admitted stream whose answer never starts (its client left first) gives its place back.
START_GRACE_SECONDS = 30.0
TenantQuery = Annotated[str | None, Query(max_length=63, description="Tenant (admins)")]
TimeoutQuery = Annotated[
    int,
    Query(alias="timeoutSeconds", ge=1, le=MAX_TIMEOUT, description="The stream ends then."),
]
MEDIA_TYPE = "application/x-ndjson"
LAGGING = "this stream fell behind the changes; watch again from the last bookmark"


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


@dataclass
class _Place:
    """An admitted stream's place: held from admission to the stream's end, or given back
    after START_GRACE_SECONDS when its answer never started."""

    tenant: str
    caller: tuple[str, str]
    admitted: float
    started: bool = False


@dataclass
class _Streams:
    """The streams this process serves now, each counted from its admission (a burst of
    requests all admitted before any starts must still meet the bounds)."""

    places: list[_Place] = field(default_factory=list)

    @property
    def open(self) -> int:
        return len(self.places)

    @property
    def streaming(self) -> int:
        """Streams whose first state is read and being sent (admitted ones may still read)."""
        return sum(1 for p in self.places if p.started)

    def admit(self, request: Request, caller: Principal) -> _Place:
        """A place for the caller's stream, if the process, the caller and its tenant have one
        to spare (else 429)."""
        state = request.app.state
        now = time.monotonic()
        self.places = [
            p for p in self.places if p.started or now - p.admitted < START_GRACE_SECONDS
        ]
        bound = int(getattr(state, "watch_max_streams", MAX_STREAMS))
        per_caller = int(getattr(state, "watch_max_streams_per_caller", MAX_STREAMS_PER_CALLER))
        per_tenant = int(getattr(state, "watch_max_streams_per_tenant", MAX_STREAMS_PER_TENANT))
        tenant = caller.tenant or ""
        key = (tenant, caller.user)
        if len(self.places) >= bound:
            raise TooManyRequests(f"this server is serving {bound} watch streams; try again later")
        if sum(1 for p in self.places if p.caller == key) >= per_caller:
            raise TooManyRequests(f"{caller.user} has {per_caller} watch streams open; close one")
        if tenant and sum(1 for p in self.places if p.tenant == tenant) >= per_tenant:
            raise TooManyRequests(f"tenant {tenant} has {per_tenant} watch streams open; close one")
        place = _Place(tenant, key, now)
        self.places.append(place)
        return place

    def leave(self, place: _Place) -> None:
        with contextlib.suppress(ValueError):
            self.places.remove(place)


def _streams(request: Request) -> _Streams:
    state = request.app.state
    streams: _Streams | None = getattr(state, "watch_streams", None)
    if streams is None:
        streams = _Streams()
        state.watch_streams = streams
    return streams


def _feed(request: Request) -> ChangeFeed:
    state = request.app.state
    feed: ChangeFeed | None = getattr(state, "watch_feed", None)
    if feed is None:
        feed = ChangeFeed(state.store, _poll(request))
        state.watch_feed = feed
    return feed


async def _counted(
    streams: _Streams, place: _Place, lines: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    place.started = True
    try:
        async for line in lines:
            yield line
    finally:
        streams.leave(place)


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
    place = streams.admit(request, caller)
    try:
        resolved = resolve_kind(kind) if kind else None
        scope = tenant if caller.is_platform_admin else (tenant or caller.tenant)
        if scope is not None and not caller.sees_tenant(scope):
            raise NotFound(f"tenant {scope} not found")
        tenants = None if scope is None else [scope]

        def read(last: int) -> list[changes.NumberedEvent]:
            who()  # a revoked token ends the stream
            return changes.events_after(store, last, tenants=tenants, kind=resolved, name=name)

        first = await run_in_threadpool(read, after)
    except BaseException:
        streams.leave(place)
        raise

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

    return StreamingResponse(_counted(streams, place, lines()), media_type=MEDIA_TYPE)


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
    place = streams.admit(request, await run_in_threadpool(who))

    def service() -> ObjectService:
        return ObjectService(store, who(), identity_changed=cache.forget_all)

    feed = _feed(request)
    # Subscribed before the first read, so that nothing between the two is missed (what the
    # read already holds comes again with the same resourceVersion and is dropped).
    subscription = feed.subscribe(kind)
    watch = ObjectWatch(service, kind, tenant, name)
    try:
        # The first read before the answer starts: a wrong kind, tenant or token is an HTTP
        # error.
        first, _ = await run_in_threadpool(watch.start, store.clock.now(), resume)
    except BaseException:
        feed.unsubscribe(kind, subscription)
        streams.leave(place)
        raise

    def step(batch: Batch) -> list[Any]:
        found = watch.take(batch)
        return [*found, bookmark(encode_cursor(batch.at))] if found else []

    async def lines() -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        try:
            for document in first:
                yield _line(document)
            quiet_since = loop.time()
            while loop.time() < deadline:
                try:
                    batch = await subscription.next(min(1.0, max(deadline - loop.time(), 0)))
                except Lagging:
                    yield _error_line(TooManyRequests(LAGGING))
                    return
                if await request.is_disconnected():
                    return
                found: list[Any] = []
                if batch is not None:
                    try:
                        found = await run_in_threadpool(step, batch)
                    except AipaasError as err:
                        yield _error_line(err)
                        return
                if not found and loop.time() - quiet_since >= HEARTBEAT_SECONDS:
                    found = [bookmark(encode_cursor(store.clock.now()))]
                if found:
                    quiet_since = loop.time()
                for document in found:
                    yield _line(document)
        finally:
            feed.unsubscribe(kind, subscription)

    return StreamingResponse(_counted(streams, place, lines()), media_type=MEDIA_TYPE)
