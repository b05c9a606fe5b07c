"""Bounds of the API's reads: page sizes and continue tokens of lists, limits of log answers.

A continue token is opaque to clients: base64 of the last row id of the page it follows, in a
small versioned document (so that its form can change without old tokens being misread).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request

from aipaas.errors import FieldError, InvalidObject
from aipaas.server.log_watch import LogWatch, ReadJobs
from aipaas.store.paging import Page

DEFAULT_LIMIT = 500
MAX_LIMIT = 5000
_VERSION = 1
_TOKEN_MAX = 1000  # characters: a row id's token is about 30, a device's a few hundred


@dataclass(frozen=True)
class ReadLimits:
    log_max_bytes: int = 8 << 20
    log_max_followers: int = 256


def configure(app: FastAPI, limits: ReadLimits) -> None:
    """Set the process's read limits (from the settings); the defaults hold until then."""
    app.state.read_limits = limits


def limits_of(request: Request) -> ReadLimits:
    limits: ReadLimits = getattr(request.app.state, "read_limits", None) or ReadLimits()
    return limits


def log_watch(request: Request, read_jobs: ReadJobs) -> LogWatch:
    """The process's one log watcher, made on first use."""
    state = request.app.state
    watch: LogWatch | None = getattr(state, "log_watch", None)
    if watch is None:
        watch = LogWatch(read_jobs, max_followers=limits_of(request).log_max_followers)
        state.log_watch = watch
    return watch


def encode_continue(after: int) -> str:
    document = json.dumps({"v": _VERSION, "after": after}, separators=(",", ":"))
    return base64.urlsafe_b64encode(document.encode()).decode().rstrip("=")


def decode_continue(token: str | None) -> int:
    """The row id a token continues after (0 with no token); 422 naming ``continue`` for a
    token this server did not give out."""
    if not token:
        return 0
    after = _document(token).get("after")
    if type(after) is not int or after < 0:
        raise _bad_token()
    return after


def _document(token: str) -> dict[str, Any]:
    if len(token) > _TOKEN_MAX:
        raise _bad_token()
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        document = json.loads(raw)
    except (binascii.Error, ValueError) as err:
        raise _bad_token() from err
    if not isinstance(document, dict) or document.get("v") != _VERSION:
        raise _bad_token()
    return document


def _bad_token() -> InvalidObject:
    return InvalidObject([FieldError("continue", "not a continue token given by this server")])


def encode_continue_key(key: list[str]) -> str:
    """A token for lists keyed by names rather than row ids (devices: node, driver, pool,
    device)."""
    document = json.dumps({"v": _VERSION, "key": key}, separators=(",", ":"))
    return base64.urlsafe_b64encode(document.encode()).decode().rstrip("=")


def decode_continue_key(token: str | None) -> list[str] | None:
    """The key a token continues after (None with no token); 422 naming ``continue`` else."""
    if not token:
        return None
    key = _document(token).get("key")
    if not isinstance(key, list) or not key or not all(isinstance(k, str) for k in key):
        raise _bad_token()
    return key


def list_metadata(page: Page[Any]) -> dict[str, Any]:
    if page.next_after is None:
        return {}
    metadata: dict[str, Any] = {"continue": encode_continue(page.next_after)}
    if page.remaining is not None:
        metadata["remainingItemCount"] = page.remaining
    return metadata
