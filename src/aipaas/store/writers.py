"""One writer at a time for SQLite, handed over by the kernel instead of by sleeping.

SQLite lets one transaction write. A writer that finds the lock taken waits in SQLite's busy
handler, which sleeps 1, 2, 5... up to 100 ms between tries: under many concurrent
submissions most time went to those sleeps. Writers of every process of one database file
instead queue on an advisory file lock (``flock``) beside it, and the threads of one process on
a lock of their own first, so the next writer starts the moment the last one commits.
PostgreSQL orders writers itself: there the queue does nothing.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine


class WriterQueue:
    """``turn()`` is held around a write transaction; re-entrant within a thread."""

    def __init__(self, lock_path: str | None) -> None:
        self._lock_path = lock_path
        self._threads = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    @classmethod
    def for_engine(cls, engine: Engine) -> WriterQueue:
        database = engine.url.database
        if engine.dialect.name != "sqlite" or not database or database == ":memory:":
            return cls(None)
        return cls(database + ".writers.lock")

    @contextmanager
    def turn(self) -> Iterator[None]:
        if self._lock_path is None:
            yield
            return
        with self._threads:
            self._depth += 1
            try:
                if self._depth == 1:
                    fcntl.flock(self._file(), fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    if self._depth == 1:
                        fcntl.flock(self._file(), fcntl.LOCK_UN)
            finally:
                self._depth -= 1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _file(self) -> int:
        if self._fd is None:
            assert self._lock_path is not None
            self._fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        return self._fd
