"""Task logs, read by range: the controller records each task's log file; the server reads it.

Nothing here holds a whole log in memory: a tail is read from the end of the file in blocks
until enough lines are found, anything else is streamed in blocks, and one answer carries at
most ``limit_bytes`` (the caller's, capped by the server's setting; the last line may be cut
short, as Kubernetes does). Lines go out as bytes, each prefixed with its task's name; a line
longer than ``MAX_LINE`` is cut into pieces.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from aipaas.store import TaskRecord

CHUNK = 1 << 16
MAX_LINE = 1 << 18  # a longer line goes out in pieces rather than growing a buffer


@dataclass(frozen=True)
class LogRange:
    """Which part of the logs one answer carries."""

    limit_bytes: int
    tail: int | None = None  # the last lines of each task (None: every line)
    # Only tasks whose log was written at or after this time (lines carry no time of their
    # own: the backends write what the task prints, so a task is chosen by its file's mtime).
    since: datetime | None = None


def chosen(records: Sequence[TaskRecord], since: datetime | None) -> list[TaskRecord]:
    """The records with a log file, written to since ``since`` when given."""
    found = []
    for record in records:
        if not record.log_path:
            continue
        try:
            written = os.stat(record.log_path).st_mtime
        except OSError:
            continue
        if since is None or written >= since.timestamp():
            found.append(record)
    return found


def read(records: Sequence[TaskRecord], window: LogRange) -> Iterator[bytes]:
    """Every chosen task's lines, task by task, until ``window.limit_bytes`` are given; in
    pieces of about ``CHUNK`` bytes (each piece is a hop to a worker thread for the server)."""
    pending: list[bytes] = []
    size = 0
    for line in _lines(records, window):
        pending.append(line)
        size += len(line)
        if size >= CHUNK:
            yield b"".join(pending)
            pending.clear()
            size = 0
    if pending:
        yield b"".join(pending)


def _lines(records: Sequence[TaskRecord], window: LogRange) -> Iterator[bytes]:
    budget = window.limit_bytes
    for record in chosen(records, window.since):
        assert record.log_path is not None
        prefix = f"{record.name} | ".encode()
        if window.tail is not None:
            lines: Iterator[bytes] = iter(tail_lines(record.log_path, window.tail, budget))
        else:
            lines = stream_lines(record.log_path)
        for line in lines:
            out = prefix + line + b"\n"
            if len(out) >= budget:
                yield out[:budget]  # as Kubernetes does: the last line may be cut short
                return
            budget -= len(out)
            yield out


def tail_lines(path: str, count: int, max_bytes: int, *, end: int | None = None) -> list[bytes]:
    """The last ``count`` lines of a file (of its first ``end`` bytes when given), read
    backwards in blocks: at most ``max_bytes`` of lines, the newest (no more than a block
    beyond ``max_bytes`` of the file is read)."""
    if count <= 0:
        return []
    try:
        handle = open(path, "rb")  # noqa: SIM115 (closed below, in every path)
    except OSError:
        return []
    with handle:
        size = handle.seek(0, os.SEEK_END)
        end = size if end is None else min(end, size)
        position = end
        blocks: list[bytes] = []
        newlines = 0
        # A final newline ends the last line; it does not start another.
        while position > 0 and newlines <= count and end - position < max_bytes:
            step = min(CHUNK, position)
            position -= step
            handle.seek(position)
            block = handle.read(step)
            blocks.append(block)
            newlines += block.count(b"\n")
    data = b"".join(reversed(blocks))
    if data.endswith(b"\n"):
        data = data[:-1]
    lines = data.split(b"\n")
    if position > 0:
        lines = lines[1:]  # the first piece is the end of a line that began further back
    newest = [piece for line in lines[-count:] for piece in _pieces(line)]
    size = sum(len(line) + 1 for line in newest)
    first = 0
    while size > max_bytes and first < len(newest):  # keep the newest lines within the bytes
        size -= len(newest[first]) + 1
        first += 1
    return newest[first:]


def stream_lines(path: str, start: int = 0) -> Iterator[bytes]:
    """The lines of a file from byte ``start``, read a block at a time."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 (closed by the with below)
    except OSError:
        return
    with handle:
        handle.seek(start)
        rest = b""
        while block := handle.read(CHUNK):
            *complete, rest = (rest + block).split(b"\n")
            for line in complete:
                yield from _pieces(line)
            while len(rest) >= MAX_LINE:
                yield rest[:MAX_LINE]
                rest = rest[MAX_LINE:]
        if rest:
            yield rest


def _pieces(line: bytes) -> Iterator[bytes]:
    if len(line) <= MAX_LINE:
        yield line
        return
    for at in range(0, len(line), MAX_LINE):
        yield line[at : at + MAX_LINE]
