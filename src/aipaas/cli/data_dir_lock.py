"""Who serves a data directory: `aipaas up` alone, or any number of `aipaas server`s.

Who calls it: cli/control_server.py, before anything is written (not the port, not the CLI
config). `aipaas up` takes an exclusive lock on ``<data dir>/serving.lock``; `aipaas server`
takes a shared one, since several servers on one database is a supported set-up (the
controller lease picks one). So a second `up` in the same folder, or a `server` beside an `up`
on its data directory, refuses with one line that says which process holds it and where it
answers, instead of starting a second server on the same database and repointing the CLI's
config. The lock is the kernel's (flock): it goes with the process, kill -9 included.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Final

LOCK_FILE: Final = "serving.lock"
HOLDER_FILE: Final = "serving.json"

# Held for the life of the process: closing the descriptor would release the lock.
_held: list[int] = []


class Taken(Exception):
    """The data directory is served already; the message says by whom, when known."""


def hold(data_dir: Path, *, verb: str) -> None:
    """Lock ``data_dir`` for this process: exclusively for ``up``, shared for ``server``.

    Raises:
        Taken: another process holds a lock this one cannot share.
    """
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    mode = fcntl.LOCK_EX if verb == "up" else fcntl.LOCK_SH
    try:
        fcntl.flock(descriptor, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise Taken(_describe(data_dir, verb)) from None
    _held.append(descriptor)


def name_holder(data_dir: Path, url: str) -> None:
    """Record this `up` (pid, URL) for the message of whoever comes next."""
    record = {"pid": os.getpid(), "url": url}
    (data_dir / HOLDER_FILE).write_text(json.dumps(record) + "\n")


def _describe(data_dir: Path, verb: str) -> str:
    holder = ""
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        record = json.loads((data_dir / HOLDER_FILE).read_text())
        pid = int(record["pid"])
        os.kill(pid, 0)  # the record of an `up` that has ended names nobody
        holder = f" (pid {pid}, {record['url']})"
    if verb == "up":
        return (
            f"aipaas already serves data directory {data_dir}{holder}: stop it first, "
            "or give this one its own --data-dir"
        )
    return (
        f"`aipaas up` serves data directory {data_dir}{holder}: give this server its own "
        "--data-dir (and --port)"
    )
