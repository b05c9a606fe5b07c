"""Exec probes of service replicas on the local backend (backends/probe_exec.py): the command
runs as the replica's user, with its environment, in its working directory, read from the
launch file the backend wrote for the replica's runner (runner.py); inside the replica's
container when it has an image (``podman exec``: local/task_exec.py). Called by
``LocalBackend.probe_exec`` from the controller's probe threads.

The working directory is entered as the user (``env --chdir`` after the uid change: a
directory root may enter and the user may not is refused, as for the task itself); the whole
process group is killed at the timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from aipaas.backends.local.runner import LAUNCH_FILE, UMASK
from aipaas.backends.local.task_exec import exec_in_task
from aipaas.backends.probe_exec import NOT_HERE
from aipaas.backends.task_exec import TIMED_OUT_CODE

ENV = "/usr/bin/env"


def run_probe(directory: Path, command: Sequence[str], timeout: float) -> str | None:
    """None when ``command`` exits 0 within ``timeout`` seconds, else why it failed."""
    try:
        launch = json.loads((directory / LAUNCH_FILE).read_text())
    except (OSError, ValueError):
        return NOT_HERE
    if isinstance(launch.get("container"), dict):  # a replica in an image: probed inside it
        return _in_container(directory, command, timeout)
    uid, gid = launch.get("uid"), launch.get("gid")
    try:
        child = subprocess.Popen(
            [ENV, "--chdir", str(launch["cwd"]), "--", *command],
            env={str(k): str(v) for k, v in launch["env"].items()},
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
        return f"cannot run {command[0]!r}: {err}"[:200]
    try:
        out, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(child.pid)
        child.communicate()
        return f"{command[0]} did not exit within {timeout:g}s"
    if child.returncode == 0:
        return None
    tail = out.decode(errors="replace").strip().splitlines()[-1:] if out else []
    said = f": {tail[0][:120]}" if tail else ""
    return f"{command[0]} exited with code {child.returncode}{said}"


def _in_container(directory: Path, command: Sequence[str], timeout: float) -> str | None:
    """The probe through ``podman exec`` (local/task_exec.py), as the replica's user."""
    result = exec_in_task(directory, command, timeout)
    if result is None:
        return NOT_HERE
    if result.exit_code == 0:
        return None
    if result.exit_code == TIMED_OUT_CODE:
        return f"{command[0]} did not exit within {timeout:g}s"
    tail = result.output.decode(errors="replace").strip().splitlines()[-1:]
    said = f": {tail[0][:120]}" if tail else ""
    return f"{command[0]} exited with code {result.exit_code}{said}"


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
