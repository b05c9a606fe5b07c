"""An optional capability: run a command in a running task, as ``aipaas exec`` asks.

The backend that runs the task runs the command beside it as the task's user, in its working
directory, with its environment, and inside its container when it has an image (``podman
exec``); on Slurm it is a step of the task's job (``srun --overlap``). An interactive
session (``aipaas exec -i``) is the same command with its input open and, when asked, a
terminal (``TaskSessions``, backends/task_session.py). The API (server/
exec_routes.py) is given a function that reaches this capability (cli/control_runtime.py wires
it): the server itself never imports a backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

#: how much of the command's output is kept (the rest is dropped, and said)
MAX_OUTPUT_BYTES = 1 << 20
#: the exit code of a command that ran past its timeout (as timeout(1) says it)
TIMED_OUT_CODE = 124


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    output: bytes


class TaskExec(Protocol):
    def exec_task(
        self, request_id: str, command: Sequence[str], timeout: float
    ) -> ExecResult | None:
        """The command's exit code and output (stdout and stderr together, at most
        MAX_OUTPUT_BYTES), killed after ``timeout`` seconds (TIMED_OUT_CODE); None when the
        task does not run on this backend (not here, or not running any more)."""
        ...


class TaskSession(Protocol):
    """An interactive command beside a task (``aipaas exec -i``): backends/task_session.py's
    ``ProcessSession`` is the one every backend gives."""

    def read(self) -> bytes: ...
    def write(self, data: bytes) -> None: ...
    def close_input(self) -> None: ...
    def resize(self, rows: int, cols: int) -> None: ...
    def wait(self) -> int: ...
    def kill(self) -> None: ...
    def close(self) -> None: ...


class TaskSessions(Protocol):
    def open_session(
        self, request_id: str, command: Sequence[str], *, tty: bool, rows: int, cols: int
    ) -> TaskSession | None:
        """The command started where the task runs, as ``exec_task`` runs one, with its input
        open and, when ``tty``, a terminal of ``rows`` x ``cols``; None when the task does not
        run on this backend (not here, or not running any more).

        Raises:
            OSError: the command cannot be started here.
        """
        ...


def task_sessions_of(backend: object) -> TaskSessions | None:
    """The backend, when it can open interactive sessions in its tasks: a wrapper
    (fencing.Fenced's ``inner``) when what it wraps can, a composite (``backends``) when one
    of its members can, so that a server on Ray says it cannot (503) rather than that the task
    is not running."""
    if not hasattr(backend, "open_session"):
        return None
    inner = getattr(backend, "inner", None)
    if inner is not None and task_sessions_of(inner) is None:
        return None
    members = getattr(backend, "backends", None)
    if isinstance(members, tuple) and not any(task_sessions_of(m) for m in members):
        return None
    return cast(TaskSessions, backend)


def task_exec_of(backend: object) -> TaskExec | None:
    """The backend, when it can run commands in its tasks."""
    if hasattr(backend, "exec_task"):
        return cast(TaskExec, backend)
    return None


def capped(output: bytes) -> bytes:
    if len(output) <= MAX_OUTPUT_BYTES:
        return output
    dropped = len(output) - MAX_OUTPUT_BYTES
    return output[:MAX_OUTPUT_BYTES] + f"\n[aipaas: {dropped} bytes more dropped]\n".encode()
