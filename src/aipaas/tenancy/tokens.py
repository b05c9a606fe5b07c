"""Bearer tokens: random, shown once, stored only as a SHA-256 hash.

A token has 256 bits of entropy, so a fast hash is enough (no password stretching needed): an
attacker with the table cannot guess a preimage. Each token also has a public id (``tok_...``)
by which it is listed and revoked; the id says nothing about the secret.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime, timedelta
from typing import Final

PREFIX: Final = "aip_"
ID_PREFIX: Final = "tok_"
# How often a token's last-use time is written: at most once a minute, not per request.
LAST_USE_EVERY: Final = timedelta(minutes=1)
LONGEST_LIFETIME: Final = timedelta(days=3650)
_DURATION = re.compile(r"(\d{1,9})([smhd]?)")
_UNIT_SECONDS: Final = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def new_token_id() -> str:
    return ID_PREFIX + secrets.token_hex(8)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_lifetime(text: str | int) -> timedelta:
    """``3600``, ``"90s"``, ``"30m"``, ``"12h"`` or ``"90d"``: between a second and ten years.

    Raises:
        ValueError: anything else (the message says what is accepted).
    """
    match = _DURATION.fullmatch(str(text).strip())
    if match is None:
        raise ValueError("a duration: seconds, or a number with s, m, h or d (like 90d)")
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds <= 0 or seconds > LONGEST_LIFETIME.total_seconds():
        raise ValueError("between 1s and 3650d")
    return timedelta(seconds=seconds)


def is_live(revoked_at: datetime | None, expires_at: datetime | None, now: datetime) -> bool:
    return revoked_at is None and (expires_at is None or expires_at > now)
