"""The entry point's side toward the replicas: one HTTP client per tenant, and what may cross.

Called by server/entry.py for every request it forwards.

- One client per tenant, each with a connection budget of its own (``TENANT_CONNECTIONS``): a
  tenant whose replicas never answer can hold only its own connections, never another
  tenant's. No client keeps cookies: a cookie one caller's answer set would otherwise go out
  with the next caller's request, served as the first.
- Credentials of this platform never reach a replica, whatever their shape: a header is one
  when it carries our token prefix or when the store knows its hash (an operator-chosen
  bootstrap token has no prefix). Only then is a public service's caller's Authorization
  header dropped; a service's own credentials pass.
- A replica's answer loses the headers that act on the platform's origin rather than on the
  page (cookies, Clear-Site-Data, service-worker scope, HSTS): every tenant's services share
  the API's and the dashboard's origin.
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import httpx

from aipaas.store import Store
from aipaas.tenancy.tokens import PREFIX as TOKEN_PREFIX
from aipaas.tenancy.tokens import hash_token

T = TypeVar("T")
#: connections one tenant's replicas may hold open at once (all services of the tenant)
TENANT_CONNECTIONS: Final = 64
#: requests of one tenant that may wait for a connection at once (past it: 503 at once)
TENANT_WAITING: Final = 4_096
#: kept-alive idle connections per tenant
TENANT_IDLE_CONNECTIONS: Final = 16
#: a replica that accepts no connection in this long is skipped
CONNECT_SECONDS: Final = 2.0
#: the longest silence inside a streamed answer (a token stream pauses between tokens)
READ_SECONDS: Final = 120.0
#: the longest any one answer may take, streaming included
ANSWER_MAX_SECONDS: Final = 3600.0
#: how long a header found not to be a platform credential is remembered
NOT_CREDENTIAL_SECONDS: Final = 2.0
_NOT_CREDENTIAL_MAX: Final = 10_000

#: answer headers that act on the whole origin, not on the replica's page
ORIGIN_WIDE: Final = frozenset(
    {
        "set-cookie",
        "set-cookie2",
        "clear-site-data",
        "service-worker-allowed",
        "strict-transport-security",
        "content-security-policy",
        "content-security-policy-report-only",
        "origin-agent-cluster",
        "access-control-allow-origin",
        "access-control-allow-credentials",
    }
)


def _no_cookies() -> http.cookiejar.CookieJar:
    """A cookie store that refuses every cookie (no domain is allowed to set one). Given to
    httpx as a CookieJar: an httpx.Cookies would be copied into a jar of the default policy."""
    policy = http.cookiejar.DefaultCookiePolicy(allowed_domains=[])
    return http.cookiejar.CookieJar(policy=policy)


def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=httpx.Timeout(READ_SECONDS, connect=CONNECT_SECONDS, pool=CONNECT_SECONDS),
        limits=httpx.Limits(
            max_connections=TENANT_CONNECTIONS, max_keepalive_connections=TENANT_IDLE_CONNECTIONS
        ),
        cookies=_no_cookies(),
        trust_env=False,  # a proxy in the server's environment is not a replica's route
        follow_redirects=False,  # a redirect is the caller's to follow
    )


class Busy(Exception):
    """A tenant has as many requests waiting for a connection as it may."""


@dataclass
class _Tenant:
    client: httpx.AsyncClient = field(default_factory=_client)
    # Requests wait here, not in httpx's pool: the pool scans every waiting request against
    # every connection at each change, so a thousand waiting requests of one tenant took the
    # event loop's whole CPU and stalled every other tenant.
    slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(TENANT_CONNECTIONS))
    waiting: int = 0


@dataclass
class UpstreamClients:
    """One client per tenant, made on first use. Only a tenant with a stored service is ever
    forwarded to (the entry point answers 404 before), so they are as many as such tenants."""

    _tenants: dict[str, _Tenant] = field(default_factory=dict)

    def of(self, tenant: str) -> httpx.AsyncClient:
        return self._tenant(tenant).client

    def _tenant(self, tenant: str) -> _Tenant:
        found = self._tenants.get(tenant)
        if found is None:
            found = self._tenants[tenant] = _Tenant()
        return found

    async def send(self, tenant: str, request: httpx.Request) -> httpx.Response:
        """The replica's answer (its body still to read), sent through one of the tenant's
        connection slots; the slot is held until ``release`` (or given back here on failure).

        Raises:
            Busy: the tenant already has ``TENANT_WAITING`` requests waiting for a slot.
        """
        held = self._tenant(tenant)
        if held.waiting >= TENANT_WAITING:
            raise Busy(tenant)
        held.waiting += 1
        try:
            await held.slots.acquire()
        finally:
            held.waiting -= 1
        try:
            return await held.client.send(request, stream=True)
        except BaseException:
            held.slots.release()
            raise

    def release(self, tenant: str) -> None:
        self._tenant(tenant).slots.release()


@dataclass
class SingleFlight:
    """Runs a blocking read in a thread once for all concurrent callers that ask the same key
    (they share its answer or its error); a caller that goes away does not cancel it."""

    _pending: dict[Hashable, asyncio.Future[Any]] = field(default_factory=dict)

    async def run(self, key: Hashable, read: Callable[[], T]) -> T:
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(asyncio.to_thread(read))
            self._pending[key] = pending
            pending.add_done_callback(lambda _: self._pending.pop(key, None))
        answer: T = await asyncio.shield(pending)
        return answer


@dataclass
class CredentialCheck:
    """Tells whether an Authorization header carries a credential of this platform."""

    store: Store
    _not_credential: dict[str, float] = field(default_factory=dict)
    _reads: SingleFlight = field(default_factory=SingleFlight)

    async def is_credential(self, header: str) -> bool:
        secret = header.partition(" ")[2].strip() or header.strip()
        if not secret:
            return False
        if secret.startswith(TOKEN_PREFIX):
            return True
        token_hash = hash_token(secret)
        now = time.monotonic()
        if self._not_credential.get(token_hash, 0.0) > now:
            return False
        known = await self._reads.run(token_hash, lambda: self.store.tokens.find_token(token_hash))
        if known is not None:
            return True
        if len(self._not_credential) >= _NOT_CREDENTIAL_MAX:
            self._not_credential.clear()
        self._not_credential[token_hash] = now + NOT_CREDENTIAL_SECONDS
        return False
