"""The Ray backend's records on the controller's side: one directory per task attempt under
``run_dir`` (``<data dir>/run/ray/<request id>/``).

Marks, each a file written atomically: ``request.json`` (the node, when), ``created`` (the
task was submitted, and to which supervisor actor: a repeated start does nothing),
``answered`` (the task ran: no start deadline any more), ``stop`` (aipaas asked it to stop),
``exit`` (the exit code, written before the supervisor actor forgets the task, so a status
asked again still answers), ``lost`` (why aipaas gave the task up). What a task is when Ray
no longer has it follows from them alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from aipaas.backends.base import TaskState, TaskStatus

STOPPED_CODE = 143  # 128 + SIGTERM, as the local backend reports a stopped task
GONE = (
    "the task is gone from Ray (its node died or was removed, its worker or the backend's "
    "supervisor actor was killed, or Ray could not place it)"
)


class TaskRecords:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir.resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)

    def dir(self, request_id: str) -> Path:
        if "/" in request_id or request_id.startswith("."):
            raise ValueError(f"invalid request id {request_id!r}")
        return self.run_dir / request_id

    def has(self, request_id: str, mark: str) -> bool:
        return (self.dir(request_id) / mark).exists()

    def mark(self, request_id: str, mark: str, text: str = "") -> None:
        write(self.dir(request_id) / mark, text)

    def since_created(self, request_id: str) -> float:
        """Seconds since the actor was asked for (0 when it was not)."""
        try:
            return time.time() - (self.dir(request_id) / "created").stat().st_mtime
        except FileNotFoundError:
            return 0.0

    def supervisor(self, request_id: str) -> str | None:
        """The supervisor actor the task was submitted to (None: never submitted)."""
        try:
            return (self.dir(request_id) / "created").read_text().strip() or None
        except FileNotFoundError:
            return None

    def node(self, request_id: str) -> str | None:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            return str(json.loads((self.dir(request_id) / "request.json").read_text())["node"])
        return None

    def recorded(self, request_id: str) -> TaskStatus | None:
        """What the records alone say: never started here, or ended with a known code (None:
        the actor must be asked)."""
        directory = self.dir(request_id)
        if not directory.exists():
            return TaskStatus(request_id, TaskState.UNKNOWN)
        try:
            code = int((directory / "exit").read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        if (directory / "stop").exists() and code != 0:
            return TaskStatus(request_id, TaskState.FAILED, code, f"stopped (exit code {code})")
        state = TaskState.SUCCEEDED if code == 0 else TaskState.FAILED
        with contextlib.suppress(FileNotFoundError):  # never started: why (driver.py)
            return TaskStatus(
                request_id, state, code, f"not started: {(directory / 'refused').read_text()}"
            )
        return TaskStatus(request_id, state, code, f"exit code {code}")

    def gone(self, request_id: str) -> TaskStatus:
        """The task whose actor is gone without a recorded exit code: stopped when aipaas
        asked (recorded as such from now on), else lost."""
        directory = self.dir(request_id)
        if (directory / "stop").exists():
            write(directory / "exit", f"{STOPPED_CODE}\n")
            return TaskStatus(request_id, TaskState.FAILED, STOPPED_CODE, "stopped")
        with contextlib.suppress(FileNotFoundError):  # why aipaas gave it up (or Ray refused)
            return TaskStatus(request_id, TaskState.LOST, message=(directory / "lost").read_text())
        if not (directory / "created").exists():
            return TaskStatus(request_id, TaskState.LOST, message="never started in Ray")
        return TaskStatus(request_id, TaskState.LOST, message=GONE)


def write(path: Path, text: str) -> None:
    """Atomically (a reader sees the old file or the new one), owner-only."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)
