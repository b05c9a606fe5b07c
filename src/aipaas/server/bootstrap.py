"""First start: create the platform-admin token, write it to an owner-only file, say where."""

from __future__ import annotations

import os
from pathlib import Path

from aipaas.api.tenancy import Role
from aipaas.store import Store
from aipaas.tenancy.tokens import hash_token, new_token

ADMIN_USER = "admin"


def ensure_admin_token(store: Store, token_file: Path, given: str | None) -> str | None:
    """Create the first admin token when the store has none; return it, or None if one exists.

    ``given`` (AIPAAS_BOOTSTRAP_TOKEN) is used instead of a random token.
    """
    if store.count_tokens() > 0:
        return None
    token = given or new_token()
    store.add_token(hash_token(token), ADMIN_USER, "", Role.PLATFORM_ADMIN.value)
    token_file.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token + "\n")
    os.chmod(token_file, 0o600)
    return token
