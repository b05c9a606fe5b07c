"""Invitations: a tenant admin invites a user with a one-time token; redeeming it creates the
user (with the role and email the invitation names) and a bearer token for it.

The invitation token (``aipinv_...``, 256 random bits) is shown once, when the invitation is
made; the Invitation object keeps only its SHA-256 hash (system annotation). Redeeming is a
compare-and-swap of the invitation's phase from Pending to Redeemed in the transaction that
creates the user: two redemptions of one token make one user, the second is refused. An
invitation past its ``expiresAt`` is Expired and redeems nothing.
"""

from __future__ import annotations

import contextlib
import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from aipaas.api.duration import seconds
from aipaas.api.finops import Invitation, InvitationStatus
from aipaas.api.meta import ObjectMeta
from aipaas.api.tenancy import Role, User, UserSpec
from aipaas.clock import isoformat
from aipaas.errors import Conflict, FieldError, Forbidden, InvalidObject, NotFound
from aipaas.store import Store
from aipaas.store.types import as_utc
from aipaas.tenancy.principal import Principal, Verb
from aipaas.tenancy.tokens import hash_token, new_token, new_token_id

PREFIX: Final = "aipinv_"
TOKEN_HASH: Final = "aipaas.dev/invitation-token-sha256"
INVITED_BY: Final = "aipaas.dev/invited-by"


@dataclass(frozen=True)
class Redeemed:
    user: User
    token: str  # the new user's bearer token, shown once


def invite(store: Store, caller: Principal, wanted: Invitation) -> tuple[Invitation, str]:
    """Store ``wanted`` (its tenant: the caller's unless a platform admin names one) and return
    it with its one-time token."""
    tenant = wanted.metadata.tenant or caller.tenant
    if not tenant:
        raise InvalidObject([FieldError("metadata.tenant", "a platform admin must name one")])
    if not caller.sees_tenant(tenant):
        raise NotFound(f"tenant {tenant} not found")
    if not caller.may(Verb.WRITE, "Invitation"):
        raise Forbidden(f"role {caller.role} may not invite users")
    if not caller.may_act_on(Role(wanted.spec.role)):
        raise Forbidden(f"role {caller.role} may not invite a {wanted.spec.role}")
    if store.find("Tenant", "", tenant) is None:
        raise NotFound(f"tenant {tenant} not found")
    if store.find("User", tenant, wanted.spec.user) is not None:
        raise Conflict(f"user {wanted.spec.user} already exists in tenant {tenant}")
    token = PREFIX + new_token().removeprefix("aip_")
    now = store.clock.now()
    annotations = {
        **wanted.metadata.annotations,
        TOKEN_HASH: hash_token(token),
        INVITED_BY: caller.user,
    }
    meta = ObjectMeta(
        name=wanted.metadata.name,
        tenant=tenant,
        labels=wanted.metadata.labels,
        annotations=annotations,
    )
    expires = now + timedelta(seconds=seconds(wanted.spec.expires_in))
    with store.transaction() as tx:
        created = store.create(Invitation(metadata=meta, spec=wanted.spec), conn=tx)
        status = InvitationStatus(phase="Pending", expires_at=isoformat(expires))
        store.write_status(created, status, conn=tx)
        store.record_event(
            created, "Invited", f"{wanted.spec.user} invited by {caller.user}", conn=tx
        )
    stored = store.get("Invitation", tenant, created.name)
    assert isinstance(stored, Invitation)
    return stored, token


def redeem(store: Store, token: str) -> Redeemed:
    """Create the invited user and a token for it; NotFound for a token no pending invitation
    has (unknown, used or expired: which one is not told)."""
    invitation = _find(store, token)
    if invitation is None:
        raise NotFound("no such invitation (unknown, used or expired)")
    now = store.clock.now()
    if _expired(invitation, now):
        _set_phase(store, invitation, "Expired")
        raise NotFound("no such invitation (unknown, used or expired)")
    spec = invitation.spec
    user = User(
        metadata=ObjectMeta(name=spec.user, tenant=invitation.tenant),
        spec=UserSpec(role=Role(spec.role), email=spec.email),
    )
    with store.transaction() as tx:
        status = (invitation.status or InvitationStatus()).model_copy(
            update={"phase": "Redeemed", "redeemed_at": isoformat(now)}
        )
        store.update_status(
            invitation, status, expected_version=invitation.metadata.resource_version, conn=tx
        )
        if store.find("User", invitation.tenant, spec.user, conn=tx) is not None:
            raise Conflict(f"user {spec.user} already exists in tenant {invitation.tenant}")
        created = store.create(user, conn=tx)
        store.record_event(created, "Created", f"by invitation {invitation.name}", conn=tx)
    secret = new_token()
    store.tokens.add_token(
        hash_token(secret), new_token_id(), created, name=f"invitation {invitation.name}"
    )
    assert isinstance(created, User)
    return Redeemed(created, secret)


def _find(store: Store, token: str) -> Invitation | None:
    if not token.startswith(PREFIX) or len(token) > 200:
        return None
    wanted = hash_token(token)
    for item in store.list_objects("Invitation", None, phases=["", "Pending"]):
        stored = item.metadata.annotations.get(TOKEN_HASH, "")
        if isinstance(item, Invitation) and hmac.compare_digest(stored, wanted):
            return item
    return None


def _expired(invitation: Invitation, now: datetime) -> bool:
    status = invitation.status
    if status is None or status.expires_at is None:
        return True
    expires = datetime.fromisoformat(status.expires_at.replace("Z", "+00:00"))
    return as_utc(now) >= as_utc(expires)


def _set_phase(store: Store, invitation: Invitation, phase: str) -> None:
    status = (invitation.status or InvitationStatus()).model_copy(update={"phase": phase})
    with contextlib.suppress(Conflict):
        store.update_status(
            invitation, status, expected_version=invitation.metadata.resource_version
        )
