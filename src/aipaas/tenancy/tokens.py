"""Bearer tokens: random, shown once, stored only as a SHA-256 hash.

A token has 256 bits of entropy, so a fast hash is enough (no password stretching needed): an
attacker with the table cannot guess a preimage.
"""

from __future__ import annotations

import hashlib
import secrets

PREFIX = "aip_"


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()
