"""Writes to users: who may act on whom, where each role lives, and keeping an admin.

Rules:
- nobody acts on a user ranked above itself (``Principal.may_act_on``): no change, no delete,
  no token minted or listed for it, and no user given a role above the writer's own;
- platform admins and metrics readers belong to no tenant (their User has no
  ``metadata.tenant``); every other role lives in one tenant;
- there is always a platform admin with a live token: the last one cannot be deleted or
  demoted, nor its last token revoked (tokens.py in server checks the latter);
- deleting a user revokes its tokens, in the same transaction.
"""

from __future__ import annotations

from aipaas.api.tenancy import Role, User
from aipaas.errors import Conflict, FieldError, Forbidden, InvalidObject, NotFound
from aipaas.store import Store
from aipaas.tenancy.principal import Principal, Verb
from aipaas.tenancy.tokens import is_live


def prepare_user(store: Store, caller: Principal, user: User) -> User:
    """``user`` as it will be written by ``caller``, in its tenant ("" for the tenant-less
    roles), with no status; refused if the caller may not write it."""
    role = user.spec.role
    if not caller.may(Verb.WRITE, "User"):
        raise Forbidden(f"role {caller.role} may not write User objects")
    if not caller.may_act_on(role):
        raise Forbidden(f"role {caller.role} may not give a user the role {role}")
    if role.tenantless:
        if user.metadata.tenant:
            raise InvalidObject(
                [FieldError("metadata.tenant", f"{role} users belong to no tenant: remove it")]
            )
        tenant = ""
    else:
        tenant = user.metadata.tenant or caller.tenant
        if not tenant:
            raise InvalidObject(
                [FieldError("metadata.tenant", f"required for a {role} user: name its tenant")]
            )
        if not caller.sees_tenant(tenant):
            raise NotFound(f"tenant {tenant} not found")
    current = store.find("User", tenant, user.name)
    if isinstance(current, User):
        if not caller.may_act_on(current.spec.role):
            raise Forbidden(f"role {caller.role} may not change a {current.spec.role} user")
        if current.spec.role is Role.PLATFORM_ADMIN and role is not Role.PLATFORM_ADMIN:
            keep_an_admin(store, leaving_user=current.metadata.uid)
    meta = user.metadata.model_copy(update={"tenant": tenant or None})
    return user.model_copy(update={"metadata": meta, "status": None})


def delete_user(store: Store, caller: Principal, user: User) -> int:
    """Delete ``user`` and revoke its tokens (one transaction); the number revoked."""
    if not caller.may_act_on(user.spec.role):
        raise Forbidden(f"role {caller.role} may not delete a {user.spec.role} user")
    if user.spec.role is Role.PLATFORM_ADMIN:
        keep_an_admin(store, leaving_user=user.metadata.uid)
    now = store.clock.now()
    with store.transaction() as tx:
        store.delete("User", user.tenant, user.name, conn=tx)
        revoked = store.tokens.revoke_tokens_of(user.metadata.uid or "", now, conn=tx)
        store.record_event(
            user, "Deleted", f"deleted by {caller.user}; {revoked} token(s) revoked", conn=tx
        )
    return revoked


def platform_admins(store: Store) -> list[User]:
    return [
        user
        for user in store.list_objects("User", "")
        if isinstance(user, User) and user.spec.role is Role.PLATFORM_ADMIN
    ]


def keep_an_admin(
    store: Store, *, leaving_user: str | None = None, leaving_token: str | None = None
) -> None:
    """Refuse (409) a change after which no platform admin would hold a live token.

    Not atomic with the change: two admins removing each other at the same moment could both
    pass. The operator's way back is the bootstrap: a server started with no live platform-admin
    token makes one (server/bootstrap.py)."""
    now = store.clock.now()
    for admin in platform_admins(store):
        if admin.metadata.uid == leaving_user:
            continue
        for token in store.tokens.list_tokens(owner_uid=admin.metadata.uid or ""):
            if token.id != leaving_token and is_live(token.revoked_at, token.expires_at, now):
                return
    raise Conflict(
        "no other platform admin would hold a live token: create another platform admin and "
        "a token for it first"
    )
