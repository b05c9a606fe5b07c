"""One dataset's directory in a node's cache, and the files that describe it.

    <root>/<tenant>/<dataset>-<hash>/       the entry (hash: of the source, sub-paths, include)
        data/<relative path>               whole files, read-only (0444), renamed in when verified
        data/<relative path>.aipaas-part   a file being copied (resumed from its length)
        manifest.json                      the files, their sizes and checksums, done or not
        stats.json                         hits, misses, bytes from source and cache, last use
        leases/<request id>                a task reading it now (its runner's pid)
        load.json                          a running background load's source (mode 0600)
        error                              why the last load failed
        lock                               flock: held by whoever fills or evicts the entry

Every JSON file is written to a temporary name and renamed: a reader (or a crash) sees the old
or the new one, never half.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PART_SUFFIX = ".aipaas-part"
MANIFEST = "manifest.json"
STATS = "stats.json"
LOAD = "load.json"
ERROR = "error"


class Busy(Exception):
    """The entry's lock is held by another process (a load or a task's staging)."""


@dataclass
class Entry:
    path: Path

    @property
    def data(self) -> Path:
        return self.path / "data"

    @property
    def leases(self) -> Path:
        return self.path / "leases"

    def read_json(self, name: str) -> dict[str, Any]:
        try:
            value = json.loads((self.path / name).read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def write_json(self, name: str, value: dict[str, Any], *, private: bool = False) -> None:
        write_atomic(self.path / name, json.dumps(value, sort_keys=True), private=private)

    @contextlib.contextmanager
    def locked(self, *, wait: bool = True) -> Iterator[None]:
        """The entry's lock (``Busy`` when ``wait`` is False and another holds it); released
        by the system when its holder dies, so a killed copier never leaves it stuck."""
        self.path.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError as err:
                raise Busy(str(self.path)) from err
            yield
        finally:
            os.close(descriptor)

    def is_locked(self) -> bool:
        try:
            with self.locked(wait=False):
                return False
        except Busy:
            return True

    def update_stats(self, **added: float) -> None:
        """Add to the counters (``last_used`` is set, not added); call under the lock."""
        stats = self.read_json(STATS)
        for key, value in added.items():
            stats[key] = value if key == "last_used" else stats.get(key, 0) + value
        self.write_json(STATS, stats)

    # leases: tasks reading the entry ------------------------------------------------------

    def add_lease(self, request_id: str, pid: int) -> None:
        self.leases.mkdir(exist_ok=True)
        # The host too: a cluster node's cache may be read from another machine (the server),
        # which cannot see that node's processes.
        write_atomic(self.leases / _lease_name(request_id), f"{pid} {socket.gethostname()}")

    def live_leases(self) -> list[str]:
        """Leases whose process still runs (a dead one is removed on the way); a lease taken
        on another host counts as live: only that host can tell (its next stage cleans it)."""
        alive: list[str] = []
        if not self.leases.is_dir():
            return alive
        for lease in self.leases.iterdir():
            if lease.name.startswith("."):
                continue
            try:
                pid_text, _, host = lease.read_text().strip().partition(" ")
                pid = int(pid_text)
            except (OSError, ValueError):
                continue
            if (host and host != socket.gethostname()) or _runs(pid, lease.name):
                alive.append(lease.name)
            else:
                with contextlib.suppress(FileNotFoundError):
                    lease.unlink()
        return alive


def _lease_name(request_id: str) -> str:
    if "/" in request_id or request_id.startswith(".") or not request_id:
        raise ValueError(f"invalid request id {request_id!r}")
    return request_id


def _runs(pid: int, request_id: str) -> bool:
    """The process is alive and is the one that took the lease (its command line names the
    request: the stage, then the runner it became); a recycled pid is not a reader."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return bool(cmdline) and state != "Z" and request_id.encode() in cmdline


def write_atomic(path: Path, text: str, *, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if not private:
            os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
