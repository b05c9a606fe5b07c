"""Trimming of the sim backend's journal: finished tasks beyond a count, or older than an age,
are dropped by rewriting the journal with the records that remain (one line each).

Only records whose end the controller can no longer need are dropped: a task whose end was
reported by ``status`` (``logged_end``) or that was stopped, and that ended at least
``GRACE_SECONDS`` ago. Running tasks are always kept.

The rewrite replaces the file (a new inode) under an exclusive ``flock`` of the old one;
appenders hold a shared lock of the file they write to and check, under it, that it is still
the journal, so no line is written to a file that was just replaced.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

GRACE_SECONDS = 60.0
DEFAULT_MAX_AGE_SECONDS = 24 * 3600.0


def ended_at(data: dict[str, Any]) -> float | None:
    """When a record's task ended, if it is one the controller no longer needs."""
    if data.get("stopped") is not None:
        return float(data["stopped"])
    if data.get("logged_end"):
        return float(data["start"]) + float(data["duration"])
    return None


def kept(
    records: dict[str, dict[str, Any]], now: float, max_records: int, max_age: float
) -> dict[str, dict[str, Any]]:
    """The records to keep: every unfinished one, and of the finished ones the newest
    ``max_records`` that ended less than ``max_age`` ago (and all within the grace)."""
    done: list[tuple[float, str]] = []
    keep: dict[str, dict[str, Any]] = {}
    for request_id, data in records.items():
        end = ended_at(data)
        if end is None or now - end < GRACE_SECONDS:
            keep[request_id] = data
        elif now - end < max_age:
            done.append((end, request_id))
    done.sort(reverse=True)
    for _, request_id in done[: max(0, max_records)]:
        keep[request_id] = records[request_id]
    return keep


def rewrite(path: str, records: dict[str, dict[str, Any]]) -> int:
    """Replace the journal with one line per record; returns the new file's size."""
    temporary = f"{path}.compact"
    lines = (
        json.dumps({"id": request_id, **data}, separators=(",", ":")) + "\n"
        for request_id, data in records.items()
    )
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.writelines(lines)
        handle.flush()
        os.fsync(handle.fileno())
        size = handle.tell()
    os.replace(temporary, path)
    return size


@contextmanager
def locked(fd: int, exclusive: bool) -> Iterator[None]:
    fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def replaced(fd: int) -> bool:
    """Whether the file open as ``fd`` was replaced by a rewrite (or removed): it has no name
    left. One ``fstat``, no path lookup: appends check it each time."""
    return os.fstat(fd).st_nlink == 0
