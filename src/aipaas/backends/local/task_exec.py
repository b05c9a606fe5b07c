"""``aipaas exec`` on the local backend (backends/task_exec.py): the command runs as the task's
user, with its environment, in its working directory, read from the launch file the backend
wrote for the task's runner (runner.py); in the task's container (``podman exec``) when it
has an image. Called by ``LocalBackend.exec_task`` from the API's worker threads, and by
``LocalBackend.open_session`` for an interactive session (``aipaas exec -i``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from aipaas.backends import containers, task_session
from aipaas.backends.local.runner import LAUNCH_FILE, UMASK
from aipaas.backends.task_exec import TIMED_OUT_CODE, ExecResult, capped
from aipaas.backends.task_session import ProcessSession

ENV = "/usr/bin/env"
#: the TERM of a session with a terminal when the task's environment has none
DEFAULT_TERM = "xterm-256color"


def exec_in_task(directory: Path, command: Sequence[str], timeout: float) -> ExecResult | None:
    """The command's result; None when the task is not running here (never, or ended)."""
    launch = _launch(directory, command, interactive=False, tty=False)
    if launch is None:
        return None
    argv, env, uid, gid = launch
    return _run(argv, env, uid, gid, timeout)


def open_session_in_task(
    directory: Path, command: Sequence[str], *, tty: bool, rows: int, cols: int
) -> ProcessSession | None:
    """``aipaas exec -i``: the command started as ``exec_in_task`` runs it, with its input
    open and, when ``tty``, a terminal (``podman exec --interactive --tty`` in a container);
    None when the task is not running here."""
    launch = _launch(directory, command, interactive=True, tty=tty)
    if launch is None:
        return None
    argv, env, uid, gid = launch
    if tty and "TERM" not in env:
        env["TERM"] = DEFAULT_TERM  # a shell's line editing needs one; the client's is unknown
    return task_session.spawn(
        argv, env, tty=tty, rows=rows, cols=cols, uid=uid, gid=gid, umask=UMASK
    )


def _launch(
    directory: Path, command: Sequence[str], *, interactive: bool, tty: bool
) -> tuple[list[str], dict[str, str], int | None, int | None] | None:
    """The argument list, environment, uid and gid that run ``command`` beside the task, from
    the launch file its runner was given; None when the task is not running here."""
    if (directory / "exit").exists():
        return None
    try:
        launch = json.loads((directory / LAUNCH_FILE).read_text())
    except (OSError, ValueError):
        return None
    uid, gid = launch.get("uid"), launch.get("gid")
    container = launch.get("container")
    if isinstance(container, dict) and container.get("name"):
        user = f"{uid}:{gid}" if uid is not None else "0:0"
        argv = containers.exec_command(
            str(container["name"]),
            command,
            user=user,
            workdir=str(launch["cwd"]),
            env={},
            interactive=interactive,
            tty=tty,
        )
        # podman runs as the server's user; the container's process as the task's
        return argv, {str(k): str(v) for k, v in container["env"].items()}, None, None
    argv = [ENV, "--chdir", str(launch["cwd"]), "--", *command]
    return argv, {str(k): str(v) for k, v in launch["env"].items()}, uid, gid


def _run(
    argv: list[str], env: dict[str, str], uid: int | None, gid: int | None, timeout: float
) -> ExecResult:
    try:
        child = subprocess.Popen(
            argv,
            env=env,
            user=uid,
            group=gid,
            extra_groups=[] if uid is not None else None,
            umask=UMASK,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except (OSError, subprocess.SubprocessError) as err:
        return ExecResult(127, f"aipaas: cannot run {argv[0]!r}: {err}\n".encode())
    try:
        out, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        out, _ = child.communicate()
        note = f"aipaas: still running after {timeout:g}s: killed\n".encode()
        return ExecResult(TIMED_OUT_CODE, capped(out + note))
    code = child.returncode
    return ExecResult(128 - code if code < 0 else code, capped(out))
