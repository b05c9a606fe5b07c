"""The Ray runner's process handling without Ray (runner.py imports the standard library only):
a command runs in its own session as the worker's child, and the worker's keeper kills the
command's whole group when the worker dies, however it dies (here: SIGKILL), while a worker
that lives on leaves the group alone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from aipaas.backends.ray import runner

SRC = str(Path(runner.__file__).resolve().parents[3])

#: a stand-in for a Ray worker: starts the command as run_task does, tells its keeper, says
#: the command's pid, then waits to be killed
WORKER = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
from aipaas.backends.ray import runner
spec = {"command": sys.argv[3:], "cwd": sys.argv[2], "log_path": sys.argv[2] + "/task.log"}
child = runner._start(spec, dict(os.environ))
runner._tell_keeper(f"{child.pid}\\n")
print(child.pid, flush=True)
time.sleep(300)
"""


def with_marker(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def wait_for(condition: object, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.05)
    return False


def start_worker(tmp_path: Path, marker: str) -> tuple[subprocess.Popen[str], int]:
    # The command and a grandchild it leaves behind, both carrying the marker.
    command = ["python3", "-c", "import subprocess, sys, time; "
               "subprocess.Popen(['sleep', '300']); time.sleep(300)", marker]  # fmt: skip
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, SRC, str(tmp_path), *command],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None
    pid = int(worker.stdout.readline())
    return worker, pid


def test_the_keeper_kills_the_commands_group_when_the_worker_is_killed(tmp_path: Path) -> None:
    marker = f"aipaas-keeper-{uuid.uuid4().hex[:8]}"
    worker, pid = start_worker(tmp_path, marker)
    try:
        assert os.getpgid(pid) == pid  # the command leads a group (a session) of its own
        assert wait_for(lambda: len(with_marker(marker)) >= 1)
        assert not _group_gone(pid)
        worker.kill()  # as a node's removal or a forced cancel ends a Ray worker
        worker.wait()
        assert wait_for(lambda: not with_marker(marker)), with_marker(marker)
        # ... the grandchild too: nothing of the group is left
        assert wait_for(lambda: _group_gone(pid))
    finally:
        worker.kill()
        worker.wait()
        _kill_group(pid)


def test_a_live_worker_keeps_its_command_running(tmp_path: Path) -> None:
    marker = f"aipaas-keeper-{uuid.uuid4().hex[:8]}"
    worker, pid = start_worker(tmp_path, marker)
    try:
        assert wait_for(lambda: len(with_marker(marker)) >= 1)
        time.sleep(0.5)  # not a timing assertion: only a chance for a wrong kill to show
        assert with_marker(marker)
        assert worker.poll() is None
    finally:
        worker.kill()
        worker.wait()
        wait_for(lambda: _group_gone(pid))
        _kill_group(pid)


def _group_gone(pgid: int) -> bool:
    """No live (not zombie) process of the group is left."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return False
    return True


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
