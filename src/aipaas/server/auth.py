"""Bearer-token authentication: the token's hash finds its user; the user's role applies."""

from __future__ import annotations

from fastapi import Request

from aipaas.api.tenancy import Role, User
from aipaas.errors import Unauthenticated
from aipaas.store import Store
from aipaas.tenancy.principal import Principal
from aipaas.tenancy.tokens import hash_token


def authenticate(store: Store, header: str | None) -> Principal:
    if not header:
        raise Unauthenticated("missing bearer token (set AIPAAS_TOKEN)")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
    record = store.find_token(hash_token(token.strip()))
    if record is None:
        raise Unauthenticated("invalid token")
    if record.role == Role.PLATFORM_ADMIN and not record.tenant:
        return Principal(record.user, "", Role.PLATFORM_ADMIN)
    user = store.find("User", record.tenant, record.user)
    if not isinstance(user, User):
        raise Unauthenticated(f"the token's user {record.user} no longer exists")
    return Principal(user.name, record.tenant, user.spec.role)


def principal_of(request: Request) -> Principal:
    """FastAPI dependency."""
    store: Store = request.app.state.store
    return authenticate(store, request.headers.get("authorization"))
