"""Task logs, read by range: the controller records each task's log file; the server reads it.

Nothing here holds a whole log in memory: a tail is read from the end of the file in blocks
until enough lines are found, anything else is streamed in blocks, and one answer carries at
most ``limit_bytes`` (the caller's, capped by the server's setting; the last line may be cut
short, as Kubernetes does). Lines go out as bytes, each prefixed with its task's name; a line
longer than ``MAX_LINE`` is cut into pieces.

A task's log may be in pieces (backends/local/runner.py writes it within a cap): the log file
holds the first bytes of the output, and ``<log>.tail/from-<offset>`` files its rotated tail,
each named after the offset of its first byte in the whole output. ``pieces`` lists them; the
readers here see the output as one sequence, with a line where bytes are missing that says how
many were dropped. Followers (server/log_watch.py) keep offsets in the whole output
(``logical_size``, ``read_at``), so a rotation under them costs a note, not a wrong read.

Who calls it: server/routes.py (the logs route), server/log_watch.py (followers).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO

from aipaas.store import TaskRecord

CHUNK = 1 << 16
MAX_LINE = 1 << 18  # a longer line goes out in pieces rather than growing a buffer
TAIL_SUFFIX = ".tail"  # as backends/local/runner.py writes them
SEGMENT_PREFIX = "from-"


@dataclass(frozen=True)
class Piece:
    """One file of a task's log: the bytes ``start`` to ``start + size`` of its output."""

    path: str
    start: int
    size: int
    mtime: float

    @property
    def end(self) -> int:
        return self.start + self.size


def pieces(log_path: str) -> list[Piece]:
    """The files of one task's log in output order (none when it has no file yet). The common
    case, a log within its head, costs a stat and one failed look at ``<log>.tail``."""
    found: list[Piece] = []
    try:
        head = os.stat(log_path)
    except OSError:
        return found
    found.append(Piece(log_path, 0, head.st_size, head.st_mtime))
    try:
        entries = list(os.scandir(log_path + TAIL_SUFFIX))
    except OSError:
        return found
    for entry in entries:
        start = entry.name[len(SEGMENT_PREFIX) :]
        if not entry.name.startswith(SEGMENT_PREFIX) or not start.isdigit():
            continue
        try:
            stat = entry.stat()
        except OSError:
            continue  # rotated away meanwhile
        found.append(Piece(entry.path, int(start), stat.st_size, stat.st_mtime))
    found.sort(key=lambda piece: piece.start)
    if len(found) > 1 and found[0].end > found[1].start:
        # Lines the runner itself wrote to the log file after its head was closed (a stop's
        # notice) overlap the tail: the file counts up to where the tail begins.
        first = found[0]
        found[0] = Piece(first.path, 0, found[1].start, first.mtime)
    return found


def logical_size(log_path: str) -> int:
    """Bytes of output the task has given so far, written or dropped (0: no log yet)."""
    return max((piece.end for piece in pieces(log_path)), default=0)


def dropped_note(count: int, *, new_line: bool) -> bytes:
    """The line that stands where ``count`` bytes of output were dropped."""
    text = (
        f"[aipaas: {count} bytes of this task's output were dropped here: its log keeps the"
        " beginning and a rotated end, and writes nothing while the log disk is nearly full]\n"
    )
    return (b"\n" if new_line else b"") + text.encode()


def read_at(log_path: str, offset: int, limit: int) -> tuple[bytes, int]:
    """At most ``limit`` bytes of the output from ``offset``, and the offset after them. Where
    bytes were dropped at ``offset``: the note that says how many, and the offset after them."""
    previous: Piece | None = None
    for piece in pieces(log_path):
        if piece.end <= offset:
            previous = piece
            continue
        if piece.start > offset:
            ended = previous is None or previous.size == 0 or _last_byte(previous) == b"\n"
            return dropped_note(piece.start - offset, new_line=not ended), piece.start
        try:
            with open(piece.path, "rb") as handle:
                handle.seek(offset - piece.start)
                data = handle.read(min(limit, piece.end - offset))
        except OSError:
            return b"", offset  # rotated away just now: the next read finds the gap
        return data, offset + len(data)
    return b"", offset


def _last_byte(piece: Piece) -> bytes:
    try:
        with open(piece.path, "rb") as handle:
            handle.seek(piece.size - 1)
            return handle.read(1)
    except OSError:
        return b"\n"


class Joined:
    """A task's log as one sequence of bytes (its pieces up to output offset ``end``, and the
    notes where bytes were dropped), read at positions in that sequence. Every piece is opened
    at once: a segment rotated away while it is read stays readable (an open file outlives its
    name), so a reader never sees a piece vanish under it. ``close`` when done."""

    def __init__(self, log_path: str, end: int | None = None) -> None:
        self.parts: list[Piece | bytes] = []
        self._handles: dict[str, BinaryIO] = {}
        at = 0
        for piece in pieces(log_path):
            if end is not None and piece.start >= end:
                break
            try:
                handle = open(piece.path, "rb")  # noqa: SIM115 (closed by close())
            except OSError:
                continue  # rotated away since it was listed: part of the gap before the next
            self._handles[piece.path] = handle
            size = piece.size if end is None else min(piece.size, end - piece.start)
            if piece.start > at:
                ended = not self.parts or self._ends_line()
                self.parts.append(dropped_note(piece.start - at, new_line=not ended))
            self.parts.append(Piece(piece.path, piece.start, size, piece.mtime))
            at = piece.start + size
        self.size = sum(p.size if isinstance(p, Piece) else len(p) for p in self.parts)

    def _ends_line(self) -> bool:
        last = self.parts[-1]
        if isinstance(last, bytes):
            return last.endswith(b"\n")
        return last.size == 0 or self._read_piece(last, last.size - 1, 1) == b"\n"

    def read(self, position: int, count: int) -> bytes:
        out: list[bytes] = []
        at = 0
        for part in self.parts:
            length = part.size if isinstance(part, Piece) else len(part)
            if count <= 0:
                break
            if position < at + length:
                skip = position - at
                take = min(count, length - skip)
                if isinstance(part, bytes):
                    out.append(part[skip : skip + take])
                else:
                    out.append(self._read_piece(part, skip, take))
                position += take
                count -= take
            at += length
        return b"".join(out)

    def _read_piece(self, piece: Piece, skip: int, take: int) -> bytes:
        handle = self._handles[piece.path]
        handle.seek(skip)
        data = handle.read(take)
        # A piece's bytes up to the size listed stay (files only grow; a rotated one is open):
        # a short read would be a file cut by hand, padded so that positions hold.
        return data + b"\0" * (take - len(data))

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()


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
        parts = pieces(record.log_path)
        if not parts:
            continue
        written = max(piece.mtime for piece in parts)
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
    joined = Joined(path, end)  # ``end`` is an offset in the output: cut before the notes
    if not joined.parts:
        return []  # no log file (yet)
    try:
        end = joined.size
        position = end
        blocks: list[bytes] = []
        newlines = 0
        # A final newline ends the last line; it does not start another.
        while position > 0 and newlines <= count and end - position < max_bytes:
            step = min(CHUNK, position)
            position -= step
            block = joined.read(position, step)
            blocks.append(block)
            newlines += block.count(b"\n")
    finally:
        joined.close()
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
    """The lines of a task's log (all its pieces) from byte ``start``, a block at a time."""
    joined = Joined(path)
    try:
        rest = b""
        position = start
        while block := joined.read(position, CHUNK):
            position += len(block)
            *complete, rest = (rest + block).split(b"\n")
            for line in complete:
                yield from _pieces(line)
            while len(rest) >= MAX_LINE:
                yield rest[:MAX_LINE]
                rest = rest[MAX_LINE:]
        if rest:
            yield rest
    finally:
        joined.close()


def _pieces(line: bytes) -> Iterator[bytes]:
    if len(line) <= MAX_LINE:
        yield line
        return
    for at in range(0, len(line), MAX_LINE):
        yield line[at : at + MAX_LINE]
