"""Bearer-token authentication: the token's hash finds the token, its owner's uid the user;
the user's current role applies.

Each API process keeps who a token is for a few seconds, because two store reads per request
were the largest cost of a submission. A role change, a deleted user or a revoked token
therefore takes effect within ``PRINCIPAL_TTL_SECONDS`` in other processes (at once in the
process that made the change, which forgets everything it knew); an entry never outlives its
token's expiry. A token's last use is written at most once a minute (``LAST_USE_EVERY``), on
a cache miss only: the hot path reads and writes nothing.
"""

from __future__ import annotations

import threading
import time
from typing import Final

from starlette.requests import HTTPConnection

from aipaas.api.tenancy import Role, User
from aipaas.errors import Forbidden, Unauthenticated
from aipaas.store import Store
from aipaas.tenancy.principal import Principal
from aipaas.tenancy.tokens import LAST_USE_EVERY, hash_token

PRINCIPAL_TTL_SECONDS: Final = 2.0
_CACHE_MAX: Final = 10_000
METRICS_ROLES: Final = frozenset({Role.METRICS_READER, Role.PLATFORM_ADMIN})


class PrincipalCache:
    """Token hash -> principal, each entry kept ``ttl`` seconds (less if the token expires)."""

    def __init__(self, ttl: float = PRINCIPAL_TTL_SECONDS) -> None:
        self.ttl = ttl
        self._entries: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def get(self, token_hash: str) -> Principal | None:
        entry = self._entries.get(token_hash)
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1]

    def put(self, token_hash: str, principal: Principal, *, at_most: float | None = None) -> None:
        """Remember ``principal`` for the TTL, or ``at_most`` seconds if that is shorter."""
        keep = self.ttl if at_most is None else min(self.ttl, at_most)
        with self._lock:
            if len(self._entries) >= _CACHE_MAX:
                self._entries.clear()
            self._entries[token_hash] = (time.monotonic() + keep, principal)

    def forget_all(self) -> None:
        with self._lock:
            self._entries.clear()


def authenticate(
    store: Store, header: str | None, cache: PrincipalCache | None = None
) -> Principal:
    """The caller of an API route.

    Raises:
        Unauthenticated: no token, or an unknown, revoked or expired one, or its user is gone.
        Forbidden: a metrics reader (it may read /metrics only).
    """
    return _api_caller(_principal(store, header, cache))


def metrics_reader(store: Store, header: str | None, cache: PrincipalCache) -> Principal:
    """The caller of /metrics: a metrics reader or a platform admin (else 403)."""
    caller = _principal(store, header, cache)
    if caller.role not in METRICS_ROLES:
        raise Forbidden(f"role {caller.role} may not read metrics")
    return caller


def remembered(header: str | None, cache: PrincipalCache) -> Principal | None:
    """The principal of a well-formed header if this process remembers it; reads no store.

    Raises:
        Unauthenticated: no header, or not ``Bearer <token>``.
        Forbidden: a remembered metrics reader.
    """
    known = cache.get(_token_hash(header))
    return None if known is None else _api_caller(known)


def _api_caller(principal: Principal) -> Principal:
    if principal.role is Role.METRICS_READER:
        raise Forbidden("role metrics-reader may read /metrics only")
    return principal


def _principal(store: Store, header: str | None, cache: PrincipalCache | None) -> Principal:
    token_hash = _token_hash(header)
    if cache is not None and (known := cache.get(token_hash)) is not None:
        return known
    principal, lifetime = _look_up(store, token_hash)
    if cache is not None:
        cache.put(token_hash, principal, at_most=lifetime)
    return principal


def _token_hash(header: str | None) -> str:
    if not header:
        raise Unauthenticated("missing bearer token (set AIPAAS_TOKEN)")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
    return hash_token(token.strip())


def _look_up(store: Store, token_hash: str) -> tuple[Principal, float | None]:
    """The token's principal and how many seconds the token has left (None: no expiry)."""
    found = store.tokens.token_and_owner(token_hash)
    if found is None:
        raise Unauthenticated("invalid token")
    record, owner = found
    now = store.clock.now()
    if record.revoked_at is not None:
        raise Unauthenticated("the token was revoked")
    if record.expires_at is not None and record.expires_at <= now:
        raise Unauthenticated("the token has expired")
    if not isinstance(owner, User):
        raise Unauthenticated(f"the token's user {record.user} no longer exists")
    if record.last_used_at is None or now - record.last_used_at >= LAST_USE_EVERY:
        store.tokens.touch_token(record.id, now)
    left = None if record.expires_at is None else (record.expires_at - now).total_seconds()
    return Principal(owner.name, owner.tenant, owner.spec.role, owner.metadata.uid or ""), left


def principal_cache(connection: HTTPConnection) -> PrincipalCache:
    cache: PrincipalCache = connection.app.state.principals
    return cache


def principal_of(connection: HTTPConnection) -> Principal:
    """FastAPI dependency; a WebSocket's handshake (server/exec_session.py) is authenticated
    by it too, from the same header."""
    store: Store = connection.app.state.store
    return authenticate(store, connection.headers.get("authorization"), principal_cache(connection))
