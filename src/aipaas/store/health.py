"""Checks of the store's own health: at start (is the SQLite file whole?) and while serving
(can the store still write, is there room left on its disk?).

Who calls it: cli/control_runtime.py checks the database before it migrates and serves
(``check_sqlite_file``: a damaged file stops the start with one line); server/app.py's /readyz
asks ``WriteProbe`` whether the store can write (a free-space floor, and a tiny write at most
every few seconds).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import insert, update
from sqlalchemy.exc import IntegrityError

from aipaas.store import tables
from aipaas.store.store import Store

log = logging.getLogger("aipaas.store")

#: the leases row the write probe rewrites (no lease has this name: a lease name is a role,
#: "controller"; the row holds only the time of the last probe)
PROBE_ROW = "write-probe"


class DamagedDatabase(Exception):
    """The database file failed its integrity check; the message says which and what to do."""


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None: not SQLite, or in memory)."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or ":memory:" in url:
        return None
    return Path(url[len(prefix) :])


def check_sqlite_file(path: Path, seconds: float) -> bool:
    """``PRAGMA quick_check`` of ``path``, for at most ``seconds`` (0: not checked). True when
    checked whole; False when the time ran out (a big database: the start goes on, it says so).

    Raises:
        DamagedDatabase: the file is not a database, or the check found damage.
    """
    if seconds <= 0 or not path.exists():
        return True
    deadline = time.monotonic() + seconds
    try:
        # Read-only, as a URI: the check writes nothing, and a missing WAL is not created.
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=seconds)
    except sqlite3.Error as err:
        raise DamagedDatabase(_damaged(path, str(err))) from err
    try:
        # Called every 10,000 virtual-machine steps: a non-zero answer interrupts the check.
        connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            rows = connection.execute("PRAGMA quick_check(5)").fetchall()
        except sqlite3.OperationalError as err:
            if "interrupted" in str(err):
                log.warning(
                    "the integrity check of %s did not finish in %gs: serving unchecked",
                    path,
                    seconds,
                )
                return False
            raise DamagedDatabase(_damaged(path, str(err))) from err
        except sqlite3.DatabaseError as err:  # "file is not a database", "malformed"
            raise DamagedDatabase(_damaged(path, str(err))) from err
    finally:
        connection.close()
    found = [str(row[0]) for row in rows]
    if found != ["ok"]:
        raise DamagedDatabase(_damaged(path, "; ".join(found)))
    return True


def _damaged(path: Path, what: str) -> str:
    what = " ".join(what.split())[:300]
    return (
        f"the database {path} is damaged ({what}): restore it from a backup, or move it "
        "aside to start with an empty one (sqlite3's .recover can save what is left)"
    )


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    why: str = ""


class WriteProbe:
    """Whether the store can write now: the free space of the SQLite file's disk against
    ``min_free_bytes`` (each call: one statvfs), and a committed write of one row at most every
    ``interval`` seconds (its answer is kept in between: a readiness probe every second costs
    a write every few). A full disk then makes the server not ready before, or as soon as,
    writes start failing."""

    def __init__(self, store: Store, *, min_free_bytes: int, interval: float = 5.0) -> None:
        self.store = store
        self.min_free_bytes = min_free_bytes
        self.interval = interval
        url = store.engine.url
        self.path = (
            Path(url.database) if url.get_backend_name() == "sqlite" and url.database else None
        )
        self._lock = threading.Lock()
        self._last: tuple[float, ProbeResult] | None = None

    def check(self) -> ProbeResult:
        room = self._room()
        if not room.ok:
            return room
        with self._lock:  # one write at a time, whatever the number of probes waiting
            now = time.monotonic()
            if self._last is not None and now - self._last[0] < self.interval:
                return self._last[1]
            result = self._write()
            self._last = (time.monotonic(), result)
            return result

    def _room(self) -> ProbeResult:
        if self.path is None or self.min_free_bytes <= 0:
            return ProbeResult(True)
        try:
            stat = os.statvfs(self.path.parent)
        except OSError as err:
            return ProbeResult(False, f"cannot read the free space of {self.path.parent}: {err}")
        free = stat.f_bavail * stat.f_frsize
        if free < self.min_free_bytes:
            return ProbeResult(
                False,
                f"{free} bytes free on the database's disk ({self.path.parent}), under the "
                f"floor of {self.min_free_bytes} (store_min_free_bytes)",
            )
        return ProbeResult(True)

    def _write(self) -> ProbeResult:
        stamp = time.time()
        try:
            with self.store.transaction() as tx:
                changed = tx.execute(
                    update(tables.leases)
                    .where(tables.leases.c.name == PROBE_ROW)
                    .values(expires_at=stamp)
                ).rowcount
                if changed == 0:
                    tx.execute(
                        insert(tables.leases).values(
                            name=PROBE_ROW, holder=PROBE_ROW, expires_at=stamp, token=0
                        )
                    )
        except IntegrityError:
            return ProbeResult(True)  # another process inserted the row first: it wrote
        except Exception as err:  # whatever the database says: it did not write
            return ProbeResult(False, f"the database refused a write: {err}".split("\n")[0])
        return ProbeResult(True)
