"""The services' entry point: ``/services/<tenant>/<name>/<path>`` is a reverse proxy to the
service's ready replicas (the endpoints the controller lists in its status).

- Balancing: the endpoint with the fewest of this process's requests in flight (ties in turn).
- A replica that refuses the connection (stopped between two reads of the status) is skipped
  for a moment and the request goes to another: nothing was sent, so nothing runs twice.
- No replica ready (scaled to zero, starting): the request waits, counted as waiting (demand
  for every metric: the autoscaler starts a replica), up to the service's
  ``queueTimeoutSeconds`` (default 5 minutes: a model's cold start; then 503 with Retry-After).
- Auth: a token of the service's tenant (any role; a platform admin's too), unless the service
  is ``public``; no credential of this platform is passed to a replica, whatever its shape
  (server/entry_upstream.py). Another tenant's service is 404.
- Isolation between tenants: one upstream client per tenant, each with its own connection
  budget and no cookie jar; the wait for a replica's answer is bounded by the service's
  ``requestTimeoutSeconds`` (then 504), a streamed answer by ``ANSWER_MAX_SECONDS``.
- Load: in-flight requests and request rate per service (server/entry_load.py).
A request's body is read whole before it is sent; the answer streams back as it comes.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from urllib.parse import unquote

import httpx
from fastapi import APIRouter, Request
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse, Response, StreamingResponse

from aipaas.api.service import Endpoint, Service
from aipaas.errors import NotFound
from aipaas.server.auth import authenticate, principal_cache, remembered
from aipaas.server.entry_load import LoadMeter
from aipaas.server.entry_upstream import (
    ANSWER_MAX_SECONDS,
    ORIGIN_WIDE,
    Busy,
    CredentialCheck,
    SingleFlight,
    UpstreamClients,
)
from aipaas.store import Store
from aipaas.tenancy.principal import Principal

router = APIRouter(include_in_schema=False)
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
#: how long a read of a service's status serves requests
STATUS_TTL_SECONDS = 0.25
#: answers of known length up to this are sent back whole, longer or unknown ones streamed
WHOLE_BODY_BYTES = 1 << 20
#: headers a caller could use to pose as another client or host: the entry point sets its own
_SPOOFABLE = frozenset({"x-real-ip", "forwarded", "x-forwarded-host", "x-forwarded-proto"})
#: on every answer: a page a replica serves gets an opaque origin (scripts, forms and popups
#: still work), and its type is not guessed
_CONFINED = {
    "content-security-policy": "sandbox allow-scripts allow-forms allow-popups allow-downloads",
    "x-content-type-options": "nosniff",
}
#: services whose status this process keeps at most
CACHE_MAX = 10_000
#: how long an endpoint that refused a connection is left out
BROKEN_SECONDS = 2.0
#: what a request that waited out queueTimeoutSeconds is told to wait before it asks again
RETRY_AFTER_SECONDS = 5
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


@dataclass
class EntryPoint:
    store: Store
    meter: LoadMeter
    clients: UpstreamClients
    credentials: CredentialCheck
    _services: dict[tuple[str, str], tuple[float, Service | None]] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)
    #: store reads under way: a burst of one tenant's requests shares one read instead of
    #: queueing every other caller behind a read per request in the shared thread pool
    reads: SingleFlight = field(default_factory=lambda: SingleFlight())
    broken: dict[str, float] = field(default_factory=dict)
    _turn: itertools.count[int] = field(default_factory=itertools.count)

    async def service(self, tenant: str, name: str, *, fresh: bool = False) -> Service | None:
        key = (tenant, name)
        cached = self._services.get(key)
        now = time.monotonic()
        if cached is not None and not fresh and now - cached[0] < STATUS_TTL_SECONDS:
            return cached[1]
        found = await self.reads.run(
            ("service", tenant, name), lambda: _read_service(self.store, tenant, name)
        )
        if len(self._services) >= CACHE_MAX:
            self._services.clear()  # names asked at random (before auth) grow it no further
        self._services[key] = (now, found)
        return found

    def release(self, where: str) -> None:
        """A request to ``where`` is over (counts of zero are dropped: endpoints come and go)."""
        left = self.in_flight.get(where, 0) - 1
        if left > 0:
            self.in_flight[where] = left
        else:
            self.in_flight.pop(where, None)

    def pick(self, service: Service) -> Endpoint | None:
        now = time.monotonic()
        for where in [w for w, until in self.broken.items() if until <= now]:
            del self.broken[where]
        endpoints = [
            e
            for e in (service.status.endpoints if service.status is not None else [])
            if self.broken.get(_where(e), 0.0) <= now
        ]
        if not endpoints:
            return None
        turn = next(self._turn)
        rotated = endpoints[turn % len(endpoints) :] + endpoints[: turn % len(endpoints)]
        return min(rotated, key=lambda e: self.in_flight.get(_where(e), 0))


async def _caller(entry: EntryPoint, header: str | None, request: Request) -> Principal:
    """Who sends ``header``. A caller this process remembers costs no store read (nor a
    thread); concurrent requests with the same unremembered header share one look-up, so a
    burst of one tenant's requests does not queue every other caller behind a store read (and
    a last-use write) per request."""
    cache = principal_cache(request)
    caller = remembered(header, cache)
    if caller is not None:
        return caller
    return await entry.reads.run(
        ("caller", header or ""), lambda: authenticate(entry.store, header, cache)
    )


def _where(endpoint: Endpoint) -> str:
    host = f"[{endpoint.address}]" if ":" in endpoint.address else endpoint.address
    return f"{host}:{endpoint.port}"


def _read_service(store: Store, tenant: str, name: str) -> Service | None:
    try:
        found = store.get("Service", tenant, name)
    except NotFound:
        return None
    return found if isinstance(found, Service) else None


def entry_point(request: Request) -> EntryPoint:
    state = request.app.state
    entry: EntryPoint | None = getattr(state, "entry_point", None)
    if entry is None:
        entry = EntryPoint(
            state.store, LoadMeter(state.store), UpstreamClients(), CredentialCheck(state.store)
        )
        state.entry_point = entry
    return entry


@router.api_route("/services/{tenant}/{name}", methods=METHODS)
@router.api_route("/services/{tenant}/{name}/{path:path}", methods=METHODS)
async def proxy(request: Request, tenant: str, name: str, path: str = "") -> Response:
    del path  # the replica is sent the path as the caller encoded it (target_of)
    entry = entry_point(request)
    service = await entry.service(tenant, name)
    if service is None or not service.spec.public:
        # Who asks is known before whether the service exists is told (no probing of names).
        caller = await _caller(entry, request.headers.get("authorization"), request)
        if not caller.sees_tenant(tenant):
            raise NotFound(f"service {name} not found")
    if service is None:
        raise NotFound(f"service {name} not found in tenant {tenant}")
    body = await request.body()
    key = (tenant, name)
    entry.meter.began(key)
    ended = False

    def end() -> None:
        nonlocal ended
        if not ended:
            ended = True
            entry.meter.ended(key)

    try:
        return await _forward(entry, request, service, body, end)
    except BaseException:
        end()
        raise


async def _forward(
    entry: EntryPoint,
    request: Request,
    service: Service,
    body: bytes,
    end: Callable[[], None],
) -> Response:
    """The replica's answer, streamed back (a token stream of an LLM arrives as it is made);
    ``end`` is called once the answer is over (it counts as in flight until then)."""
    # A request waits for a ready replica up to the queue's bound (a cold start takes that
    # long), and then gives a replica requestTimeoutSeconds to answer.
    queue_deadline = time.monotonic() + service.spec.queue_timeout_seconds
    key = (service.tenant, service.name)
    waiting = False

    def wait(now: bool) -> None:
        """The request waits for a replica (``now``) or no longer does; counted once."""
        nonlocal waiting
        if now and not waiting:
            entry.meter.wait_began(key)
        elif waiting and not now:
            entry.meter.wait_ended(key)
        waiting = now

    try:
        return await _send(entry, request, service, body, end, queue_deadline, wait)
    finally:
        wait(False)


async def _send(
    entry: EntryPoint,
    request: Request,
    service: Service,
    body: bytes,
    end: Callable[[], None],
    queue_deadline: float,
    wait: Callable[[bool], None],
) -> Response:
    """``_forward``'s loop: wait for a ready replica, send, relay the answer."""
    # Every Authorization header counts: a second one must not slip a token past the first.
    sent = request.headers.getlist("authorization")
    credential = bool(sent) and (
        not service.spec.public
        or any([await entry.credentials.is_credential(header) for header in sent])
    )
    headers = _forwarded_headers(request, service, drop_authorization=credential)
    client = entry.clients.of(service.tenant)
    tenant = service.tenant
    target = target_of(request, service.tenant, service.name)
    if target is None:
        end()
        raise NotFound(f"service {service.name} not found")
    while True:
        endpoint = entry.pick(service)
        if endpoint is None:
            wait(True)  # demand for every metric, written at once: the autoscaler hears now
            if time.monotonic() >= queue_deadline:
                end()
                return JSONResponse(
                    {
                        "error": f"service {service.name}: no replica became ready within "
                        f"{service.spec.queue_timeout_seconds:g}s (queueTimeoutSeconds)"
                    },
                    status_code=503,
                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
                )
            await asyncio.sleep(0.1)
            found = await entry.service(service.tenant, service.name, fresh=True)
            if found is None:
                raise NotFound(f"service {service.name} not found in tenant {service.tenant}")
            service = found
            continue
        wait(False)
        where = _where(endpoint)
        entry.in_flight[where] = entry.in_flight.get(where, 0) + 1
        outgoing = client.build_request(
            request.method, f"http://{where}{target}", headers=headers, content=body
        )
        try:
            # The whole wait for the answer's head, pool and connection included, is bounded:
            # a read timeout alone restarts with every byte a slow replica drips.
            left = service.spec.request_timeout_seconds
            answer = await asyncio.wait_for(entry.clients.send(tenant, outgoing), left)
        except Busy:
            entry.release(where)
            end()
            return JSONResponse(
                {"error": f"service {service.name}: too many requests waiting"},
                status_code=503,
                headers={"Retry-After": "1"},
            )
        except (httpx.ConnectError, httpx.ConnectTimeout):
            entry.release(where)
            entry.broken[where] = time.monotonic() + BROKEN_SECONDS
            continue
        except (TimeoutError, httpx.PoolTimeout):
            entry.release(where)
            end()
            return JSONResponse(
                {
                    "error": f"service {service.name}: replica {endpoint.replica} did not "
                    f"answer within {service.spec.request_timeout_seconds:g}s"
                },
                status_code=504,
            )
        except httpx.HTTPError as err:
            entry.release(where)
            end()
            return JSONResponse(
                {"error": f"replica {endpoint.replica} failed: {type(err).__name__}"},
                status_code=502,
            )

        finish = _Finish(entry, answer, where, tenant, end)
        kept = _answer_headers(answer)
        length = answer.headers.get("content-length", "")
        if length.isdigit() and int(length) <= WHOLE_BODY_BYTES:
            # A short answer of known length goes back in one piece: streaming it cost more
            # than the answer (a write per part, a task watching for the client leaving).
            try:
                content = await answer.aread()
            except httpx.HTTPError as err:
                content = f"replica {endpoint.replica} broke off: {err}".encode()
                kept = dict(_CONFINED)
                answer.status_code = 502
            finally:
                await finish()
            return Response(content, status_code=answer.status_code, headers=kept)
        return StreamingResponse(
            _relay(answer, finish),
            status_code=answer.status_code,
            headers=kept,
            background=BackgroundTask(finish),
        )


@dataclass
class _Finish:
    """Closes a replica's answer and ends its count, once, whichever way the stream ends
    (the answer is over, the replica broke off, the client went away)."""

    entry: EntryPoint
    answer: httpx.Response
    where: str
    tenant: str
    end: Callable[[], None]
    done: bool = False

    async def __call__(self) -> None:
        if self.done:
            return
        self.done = True
        self.entry.release(self.where)
        self.entry.clients.release(self.tenant)
        self.end()
        await self.answer.aclose()


async def _relay(answer: httpx.Response, finish: _Finish) -> AsyncIterator[bytes]:
    ends = time.monotonic() + ANSWER_MAX_SECONDS
    try:
        async for chunk in answer.aiter_raw():
            yield chunk
            if time.monotonic() > ends:
                return  # an answer that never ends holds a connection of its tenant forever
    except httpx.HTTPError:
        return  # the replica broke off: the client sees a short answer, as from the replica
    finally:
        await finish()


def _answer_headers(answer: httpx.Response) -> dict[str, str]:
    """A replica's headers less those of its hop and those that act on the whole origin, with
    the page confined: every tenant's services share this server's origin with the API and the
    dashboard (which keeps its token in that origin's session storage), so what a replica
    serves runs in a sandbox of its own origin, sets no cookies and clears no site data."""
    named = {t.strip().lower() for t in answer.headers.get("connection", "").split(",")}
    dropped = _HOP_BY_HOP | named | ORIGIN_WIDE
    kept = {k: v for k, v in answer.headers.items() if k.lower() not in dropped}
    return {**kept, **_CONFINED}


def _forwarded_headers(
    request: Request, service: Service, *, drop_authorization: bool
) -> dict[str, str]:
    """The caller's headers less those of this hop (and those its Connection header names),
    less its Authorization when that is a credential of this platform (a public service of one
    tenant must not collect the tokens of another's callers; its own credentials pass), with
    forwarding headers of our own."""
    named = {t.strip().lower() for t in request.headers.get("connection", "").split(",")}
    dropped = _HOP_BY_HOP | named | _SPOOFABLE
    if drop_authorization:
        dropped = dropped | {"authorization"}
    headers = {k: v for k, v in request.headers.items() if k.lower() not in dropped}
    headers["x-forwarded-for"] = request.client.host if request.client is not None else ""
    headers["x-forwarded-proto"] = request.url.scheme
    headers["x-forwarded-host"] = request.headers.get("host", "")
    headers["x-forwarded-prefix"] = f"/services/{service.tenant}/{service.name}"
    return headers


def target_of(request: Request, tenant: str, name: str) -> str | None:
    """The path and query the replica is sent, as the caller encoded them (an encoded ``?``
    or CR LF stays encoded); None when the raw path does not name this service."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    parts = raw.decode("latin-1").split("/", 4)  # "", "services", tenant, name, rest
    if len(parts) < 4 or unquote(parts[2]) != tenant or unquote(parts[3]) != name:
        return None
    query = request.scope.get("query_string", b"").decode("latin-1")
    return "/" + (parts[4] if len(parts) > 4 else "") + (f"?{query}" if query else "")
