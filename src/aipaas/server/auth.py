"""Bearer-token authentication: the token's hash finds its user; the user's role applies.

Each API process keeps who a token is for a few seconds, because two store reads per request
were the largest cost of a submission. A role change or a deleted user therefore takes effect
within ``PRINCIPAL_TTL_SECONDS`` (at once in the process that made the change, which forgets
everything it knew).
"""

from __future__ import annotations

import threading
import time
from typing import Final

from fastapi import Request

from aipaas.api.tenancy import Role, User
from aipaas.errors import Unauthenticated
from aipaas.store import Store
from aipaas.tenancy.principal import Principal
from aipaas.tenancy.tokens import hash_token

PRINCIPAL_TTL_SECONDS: Final = 2.0
_CACHE_MAX: Final = 10_000


class PrincipalCache:
    """Token hash -> principal, each entry kept ``ttl`` seconds."""

    def __init__(self, ttl: float = PRINCIPAL_TTL_SECONDS) -> None:
        self.ttl = ttl
        self._entries: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def get(self, token_hash: str) -> Principal | None:
        entry = self._entries.get(token_hash)
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1]

    def put(self, token_hash: str, principal: Principal) -> None:
        with self._lock:
            if len(self._entries) >= _CACHE_MAX:
                self._entries.clear()
            self._entries[token_hash] = (time.monotonic() + self.ttl, principal)

    def forget_all(self) -> None:
        with self._lock:
            self._entries.clear()


def authenticate(
    store: Store, header: str | None, cache: PrincipalCache | None = None
) -> Principal:
    token_hash = _token_hash(header)
    if cache is not None and (known := cache.get(token_hash)) is not None:
        return known
    principal = _look_up(store, token_hash)
    if cache is not None:
        cache.put(token_hash, principal)
    return principal


def remembered(header: str | None, cache: PrincipalCache) -> Principal | None:
    """The principal of a well-formed header if this process remembers it; reads no store.

    Raises:
        Unauthenticated: no header, or not ``Bearer <token>``.
    """
    return cache.get(_token_hash(header))


def _token_hash(header: str | None) -> str:
    if not header:
        raise Unauthenticated("missing bearer token (set AIPAAS_TOKEN)")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
    return hash_token(token.strip())


def _look_up(store: Store, token_hash: str) -> Principal:
    record = store.find_token(token_hash)
    if record is None:
        raise Unauthenticated("invalid token")
    if record.role == Role.PLATFORM_ADMIN and not record.tenant:
        return Principal(record.user, "", Role.PLATFORM_ADMIN)
    user = store.find("User", record.tenant, record.user)
    if not isinstance(user, User):
        raise Unauthenticated(f"the token's user {record.user} no longer exists")
    return Principal(user.name, record.tenant, user.spec.role)


def principal_cache(request: Request) -> PrincipalCache:
    cache: PrincipalCache = request.app.state.principals
    return cache


def principal_of(request: Request) -> Principal:
    """FastAPI dependency."""
    store: Store = request.app.state.store
    return authenticate(store, request.headers.get("authorization"), principal_cache(request))
