"""First start: make the platform-admin user and its token, write the token to an owner-only
file, say where.

The bootstrap token is an ordinary token of a real User (``admin``, role platform-admin, no
tenant): it can be listed, and revoked once another platform admin holds a live token. A
server that starts with no live platform-admin token at all (first start, or every admin
token expired) makes a new one: whoever can start the server already holds its database.
"""

from __future__ import annotations

import os
from pathlib import Path

from aipaas.api.meta import ObjectMeta
from aipaas.api.tenancy import Role, User, UserSpec
from aipaas.errors import AlreadyExists
from aipaas.store import Store
from aipaas.tenancy.tokens import hash_token, is_live, new_token, new_token_id
from aipaas.tenancy.users import platform_admins

ADMIN_USER = "admin"
BOOTSTRAP_TOKEN_NAME = "bootstrap"


def ensure_admin_token(store: Store, token_file: Path, given: str | None) -> str | None:
    """Create an admin token when no platform admin holds a live one; return it, else None.

    ``given`` (AIPAAS_BOOTSTRAP_TOKEN) is used instead of a random token, unless it was used
    before (a revoked or expired token never comes back: a random one is made instead).
    """
    admins = platform_admins(store)
    admin = admins[0] if admins else _create_admin(store)
    store.tokens.adopt_tokens(admin)  # a token from before tokens had owners (migration 0003)
    now = store.clock.now()
    for user in admins or [admin]:
        tokens = store.tokens.list_tokens(owner_uid=user.metadata.uid or "")
        if any(is_live(t.revoked_at, t.expires_at, now) for t in tokens):
            return None
    token = given if given and store.tokens.find_token(hash_token(given)) is None else new_token()
    store.tokens.add_token(hash_token(token), new_token_id(), admin, name=BOOTSTRAP_TOKEN_NAME)
    token_file.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token + "\n")
    os.chmod(token_file, 0o600)
    return token


def _create_admin(store: Store) -> User:
    user = User(metadata=ObjectMeta(name=ADMIN_USER), spec=UserSpec(role=Role.PLATFORM_ADMIN))
    try:
        created = store.create(user)
    except AlreadyExists:  # a second server on the same database made it a moment ago
        return platform_admins(store)[0]
    store.record_event(created, "Created", "created at the server's first start")
    assert isinstance(created, User)
    return created
