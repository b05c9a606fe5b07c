"""Task logs: the controller records each task's log file; the server reads and streams them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

from aipaas.store import TaskRecord

CHUNK = 1 << 16
Snapshot = Callable[[], tuple[Sequence[TaskRecord], bool]]


def read_lines(records: Sequence[TaskRecord]) -> list[str]:
    """Every task's log, task by task, each line prefixed with the task's name."""
    lines: list[str] = []
    for record in records:
        if not record.log_path:
            continue
        path = Path(record.log_path)
        if not path.exists():
            continue
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            lines.extend(f"{record.name} | {line.rstrip(chr(10))}\n" for line in handle)
    return lines


async def follow(snapshot: Snapshot, poll_seconds: float = 0.3) -> AsyncIterator[str]:
    """Yield new lines of every task as they are written, until the job is done and drained.

    ``snapshot()`` (run in a thread: it reads the store) returns the tasks and whether the job
    has finished.
    """
    offsets: dict[str, int] = {}
    partial: dict[str, str] = {}
    while True:
        records, done = await asyncio.to_thread(snapshot)
        wrote = False
        for record in records:
            if not record.log_path or not Path(record.log_path).exists():
                continue
            with Path(record.log_path).open("rb") as handle:
                handle.seek(offsets.get(record.name, 0))
                data = handle.read(CHUNK)
            if not data:
                continue
            wrote = True
            offsets[record.name] = offsets.get(record.name, 0) + len(data)
            text = partial.pop(record.name, "") + data.decode("utf-8", errors="replace")
            *complete, rest = text.split("\n")
            if rest:
                partial[record.name] = rest
            for line in complete:
                yield f"{record.name} | {line}\n"
        if done and not wrote:
            for name, rest in partial.items():
                yield f"{name} | {rest}\n"
            return
        if not wrote:
            await asyncio.sleep(poll_seconds)
