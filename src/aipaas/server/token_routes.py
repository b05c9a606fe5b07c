"""Token routes under /api/v1/tokens: create, list, show, revoke.

Who sees which tokens: a platform admin all; a tenant admin those of its tenant's users (none
ranked above it); anyone else its own. Another's token reads as 404, as objects of another
tenant do. The secret is shown once, at creation; neither it nor its hash is ever listed.
The caller is authenticated before the body is read, and the body is small.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Final

from fastapi import APIRouter, Depends, Query, Request
from pydantic import AwareDatetime, Field, ValidationError, field_validator, model_validator
from starlette.concurrency import run_in_threadpool

from aipaas.api.errors import invalid
from aipaas.api.meta import Model, Name
from aipaas.api.parsing import load_json
from aipaas.api.tenancy import Role, User
from aipaas.errors import FieldError, Forbidden, InvalidObject, NotFound
from aipaas.server import reads
from aipaas.server.auth import authenticate, principal_cache, principal_of
from aipaas.server.body_limit import read_body
from aipaas.server.service import ObjectService
from aipaas.store import Store, TokenRecord
from aipaas.tenancy.principal import Principal, Verb
from aipaas.tenancy.tokens import hash_token, is_live, new_token, new_token_id, parse_lifetime
from aipaas.tenancy.users import keep_an_admin

router = APIRouter(prefix="/api/v1", tags=["tokens"])
Caller = Annotated[Principal, Depends(principal_of)]
MAX_TOKEN_REQUEST_BYTES: Final = 4096


class TokenRequest(Model):
    """A new token for ``user`` (in ``tenant``; a platform admin may leave it out when only
    one user has the name). At most one of ``expiresIn`` and ``expiresAt``; neither: no
    expiry."""

    user: Name
    tenant: Name | None = None
    name: Name | None = Field(default=None, description="What the token is for (ci, laptop).")
    expires_in: str | int | None = Field(
        default=None, description="Lifetime: seconds, or 90s, 30m, 12h, 90d (up to 3650d)."
    )
    expires_at: AwareDatetime | None = Field(default=None, description="RFC 3339, with a zone.")

    @field_validator("expires_in")
    @classmethod
    def _lifetime(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            parse_lifetime(value)  # ValueError: pydantic names the field
        return value

    @model_validator(mode="after")
    def _one_expiry(self) -> TokenRequest:
        if self.expires_in is not None and self.expires_at is not None:
            raise ValueError("give expiresIn or expiresAt, not both")
        return self


class TokenView(Model):
    """A token as listed: never its secret or its hash."""

    id: str
    name: str
    user: str
    tenant: str
    state: str = Field(description="active, expired or revoked")
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None


class TokenAnswer(TokenView):
    token: str = Field(description="The secret, shown once; only its hash is stored.")
    role: str


class TokenList(Model):
    metadata: dict[str, str | int] = Field(
        default_factory=dict, description="continue (and remainingItemCount) when more follow"
    )
    items: list[TokenView]


_BODY_SCHEMA = TokenRequest.model_json_schema(by_alias=True)


@router.post(
    "/tokens",
    status_code=201,
    response_model=TokenAnswer,
    summary="Create a token for a user (shown once)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _BODY_SCHEMA}},
        }
    },
)
async def create_token(request: Request) -> TokenAnswer:
    store: Store = request.app.state.store
    cache = principal_cache(request)
    header = request.headers.get("authorization")
    caller = await run_in_threadpool(authenticate, store, header, cache)
    wanted = _token_request(await read_body(request, MAX_TOKEN_REQUEST_BYTES))
    return await run_in_threadpool(_create, store, caller, wanted)


def _create(store: Store, caller: Principal, wanted: TokenRequest) -> TokenAnswer:
    tenant = wanted.tenant or caller.tenant or None
    if tenant is not None and not caller.sees_tenant(tenant):
        raise NotFound(f"user {wanted.user} not found")
    try:
        # A platform admin naming no tenant finds the user by name, if only one has it.
        user = ObjectService(store, caller).get("User", wanted.user, tenant)
    except NotFound as err:
        raise NotFound(f"user {wanted.user} not found") from err
    if not isinstance(user, User):
        raise NotFound(f"user {wanted.user} not found")
    if not caller.may(Verb.WRITE, "Token"):
        raise Forbidden(f"role {caller.role} may not create tokens")
    if not caller.may_act_on(user.spec.role):
        raise Forbidden(f"role {caller.role} may not create tokens for a {user.spec.role} user")
    now = store.clock.now()
    expires_at = _expiry(wanted, now)
    secret = new_token()
    record = store.tokens.add_token(
        hash_token(secret),
        new_token_id(),
        user,
        name=wanted.name or "",
        expires_at=expires_at,
        created_at=now,
    )
    store.record_event(user, "TokenCreated", f"token {record.id} created by {caller.user}")
    view = _view(record, now)
    return TokenAnswer(**view.model_dump(), token=secret, role=user.spec.role.value)


@router.get("/tokens", response_model=TokenList, summary="A page of the tokens the caller may see")
def list_tokens(
    request: Request,
    caller: Caller,
    tenant: Annotated[str | None, Query(max_length=63, description="Tenant (admins)")] = None,
    limit: Annotated[
        int, Query(ge=1, le=reads.MAX_LIMIT, description="Most items in one answer (a page).")
    ] = reads.DEFAULT_LIMIT,
    continue_: Annotated[
        str | None,
        Query(alias="continue", max_length=200, description="metadata.continue of the last page."),
    ] = None,
) -> TokenList:
    store: Store = request.app.state.store
    after = reads.decode_continue(continue_)
    now = store.clock.now()
    if tenant is not None and not caller.sees_tenant(tenant):
        raise NotFound(f"tenant {tenant} not found")
    if caller.is_platform_admin:
        page = store.tokens.tokens_page(limit=limit, after=after, tenant=tenant)
        records = page.items
    elif caller.role is Role.TENANT_ADMIN:
        page = store.tokens.tokens_page(limit=limit, after=after, tenant=caller.tenant)
        roles = _owner_roles(store, caller.tenant)
        records = [r for r in page.items if caller.may_act_on(roles.get(r.owner_uid, Role.VIEWER))]
    else:
        page = store.tokens.tokens_page(limit=limit, after=after, owner_uid=caller.uid)
        records = page.items
    return TokenList(metadata=reads.list_metadata(page), items=[_view(r, now) for r in records])


@router.get("/tokens/{token_id}", response_model=TokenView, summary="One token, by its id")
def get_token(token_id: str, request: Request, caller: Caller) -> TokenView:
    store: Store = request.app.state.store
    return _view(_visible(store, caller, token_id), store.clock.now())


@router.delete("/tokens/{token_id}", response_model=TokenView, summary="Revoke a token")
def revoke_token(token_id: str, request: Request, caller: Caller) -> TokenView:
    store: Store = request.app.state.store
    record = _visible(store, caller, token_id)
    now = store.clock.now()
    if record.revoked_at is None:
        keep_an_admin(store, leaving_token=record.id)
        store.tokens.revoke_token(record.id, now)
        # This process forgets at once; the others within the principal cache's TTL.
        principal_cache(request).forget_all()
        revoked = store.tokens.get_token(record.id)
        record = revoked if revoked is not None else record
    return _view(record, now)


def _visible(store: Store, caller: Principal, token_id: str) -> TokenRecord:
    """The token if the caller may see (and so revoke) it; 404 otherwise."""
    record = store.tokens.get_token(token_id) if len(token_id) <= 32 else None
    if record is None or not _sees(store, caller, record):
        raise NotFound(f"token {token_id} not found")
    return record


def _sees(store: Store, caller: Principal, record: TokenRecord) -> bool:
    if caller.is_platform_admin or (caller.uid and record.owner_uid == caller.uid):
        return True
    if caller.role is not Role.TENANT_ADMIN or record.tenant != caller.tenant:
        return False
    # A token whose owner is gone (so revoked) ranks as nobody's: its tenant admin sees it.
    role = _owner_roles(store, record.tenant).get(record.owner_uid, Role.VIEWER)
    return caller.may_act_on(role)


def _owner_roles(store: Store, tenant: str) -> dict[str, Role]:
    """uid -> role of the users of a tenant (a platform admin left in one from before issue 10
    ranks above its tenant admin: its tokens are not theirs to see)."""
    return {
        user.metadata.uid or "": user.spec.role
        for user in store.list_objects("User", tenant)
        if isinstance(user, User)
    }


def _view(record: TokenRecord, now: datetime) -> TokenView:
    if record.revoked_at is not None:
        state = "revoked"
    elif is_live(record.revoked_at, record.expires_at, now):
        state = "active"
    else:
        state = "expired"
    return TokenView(
        id=record.id,
        name=record.name,
        user=record.user,
        tenant=record.tenant,
        state=state,
        created_at=record.created_at,
        expires_at=record.expires_at,
        last_used_at=record.last_used_at,
        revoked_at=record.revoked_at,
    )


def _expiry(wanted: TokenRequest, now: datetime) -> datetime | None:
    if wanted.expires_in is not None:
        return now + parse_lifetime(wanted.expires_in)
    if wanted.expires_at is None:
        return None
    if wanted.expires_at <= now:
        raise InvalidObject([FieldError("expiresAt", "must be in the future")])
    if wanted.expires_at - now > timedelta(days=3650):
        raise InvalidObject([FieldError("expiresAt", "at most 3650 days from now")])
    return wanted.expires_at


def _token_request(body: bytes) -> TokenRequest:
    # Parsed as every JSON body is (api/parsing.py): a key given twice is refused, not the
    # last silently kept; NaN and deep nesting too.
    try:
        data = load_json(body.decode("utf-8")) if body.strip() else None
    except UnicodeDecodeError as err:
        raise InvalidObject([FieldError("", f"not UTF-8: {err}")]) from err
    try:
        return TokenRequest.model_validate(data)
    except ValidationError as err:
        raise invalid(err, what="token request") from err
