"""Runs each task as a real process on this machine.

Each task has a directory under ``run_dir/<request_id>`` holding its pid and, once it ends, its
exit code (written by the runner, see runner.py). That directory is the backend's memory: a
restarted server finds its running tasks again, and starting an id whose directory exists does
nothing, so no task runs twice.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from aipaas.api.devices import ResourceSlice
from aipaas.backends.base import Inventory, LaunchRequest, NodeInfo, TaskState, TaskStatus
from aipaas.backends.local import machine
from aipaas.backends.local.machine import gpus_of
from aipaas.backends.local.nvml import publish_slice, visible_devices

# Variables a task inherits from the server's environment; nothing else (no tokens) leaks.
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL")


class LocalBackend:
    name = "local"

    def __init__(
        self,
        run_dir: Path,
        *,
        node_name: str | None = None,
        cpu_milli: int | None = None,
        memory_mib: int | None = None,
        gpus: Sequence[machine.Gpu] | None = None,
        environ: Mapping[str, str] | None = None,
        published: ResourceSlice | None = None,
    ) -> None:
        self.run_dir = run_dir.resolve()  # tasks run elsewhere: paths must be absolute
        self.run_dir.mkdir(parents=True, exist_ok=True)
        name = node_name or machine.node_name()
        # This machine's GPUs as a DRA ResourceSlice (nvml.py); no GPU or no NVML: CPU-only.
        # ``published`` stands in for NVML (tests); ``gpus`` alone means no slice at all.
        if published is not None:
            self.slice: ResourceSlice | None = published
        else:
            self.slice = publish_slice(name) if gpus is None else None
        self.gpus = list(gpus_of(self.slice) if self.slice is not None else gpus or [])
        self.node = NodeInfo(
            name=name,
            backend=self.name,
            cpu_milli=cpu_milli or machine.cpu_milli(),
            memory_mib=memory_mib or machine.memory_mib(),
            gpu_count=len(self.gpus),
            gpu_model=self.gpus[0].model if self.gpus else "",
            gpu_memory_mib=self.gpus[0].memory_mib if self.gpus else 0,
            labels={"aipaas.dev/backend": "local"},
        )
        source = os.environ if environ is None else environ
        self.base_env = {key: source[key] for key in INHERITED if key in source}
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def inventory(self) -> Inventory:
        features = {"processes"} | ({"gpu"} if self.gpus else set())
        slices = (self.slice,) if self.slice is not None and self.slice.spec.devices else ()
        return Inventory((self.node,), frozenset(features), slices)

    def start(self, request: LaunchRequest) -> None:
        directory = self._dir(request.request_id)
        try:
            directory.mkdir(parents=True)  # the claim: exists -> already started
        except FileExistsError:
            return
        log_path = Path(request.log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(self.base_env)
        env.update(request.env)
        try:
            # A task sees only its GPUs; one that asked for none sees none ("" hides them all).
            env["CUDA_VISIBLE_DEVICES"] = visible_devices(request, self.slice)
        except ValueError as err:
            with log_path.open("ab") as log:
                log.write(f"aipaas: cannot start the task: {err}\n".encode())
            (directory / "exit").write_text("127\n")
            return
        env["PYTHONUNBUFFERED"] = "1"
        cwd = request.working_dir or str(directory)
        with log_path.open("ab") as log:
            try:
                child = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "aipaas.backends.local.runner",
                        str(directory),
                        "--",
                        *request.command,
                    ],
                    env=env,
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as err:
                log.write(f"aipaas: cannot start the task: {err}\n".encode())
                (directory / "exit").write_text("127\n")
                return
        (directory / "pid").write_text(f"{child.pid}\n")
        with self._lock:
            self._children[request.request_id] = child

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        pid = self._pid(request_id)
        if pid is None or (self._dir(request_id) / "exit").exists():
            return
        (self._dir(request_id) / "stop").touch()
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        timer = threading.Timer(grace_seconds, self._kill, (request_id, pid))
        timer.daemon = True
        timer.start()

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        self._reap()
        return {rid: self._status(rid) for rid in request_ids}

    def close(self) -> None:
        self._reap()

    # helpers ------------------------------------------------------------------------------

    def _dir(self, request_id: str) -> Path:
        if "/" in request_id or request_id.startswith("."):
            raise ValueError(f"invalid request id {request_id!r}")
        return self.run_dir / request_id

    def _pid(self, request_id: str) -> int | None:
        try:
            return int((self._dir(request_id) / "pid").read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _status(self, request_id: str) -> TaskStatus:
        directory = self._dir(request_id)
        if not directory.exists():
            return TaskStatus(request_id, TaskState.UNKNOWN)
        exit_file = directory / "exit"
        if exit_file.exists():
            try:
                code = int(exit_file.read_text().strip())
            except ValueError:
                return TaskStatus(request_id, TaskState.LOST, None, "unreadable exit code")
            state = TaskState.SUCCEEDED if code == 0 else TaskState.FAILED
            return TaskStatus(request_id, state, code, f"exit code {code}")
        pid = self._pid(request_id)
        if pid is None:
            # Claimed but not yet recorded: only this process can be starting it right now.
            with self._lock:
                starting = request_id in self._children
            state = TaskState.RUNNING if starting else TaskState.LOST
            return TaskStatus(request_id, state, None, "" if starting else "never started")
        if _is_runner(pid, request_id) or _is_young(directory / "pid", pid):
            return TaskStatus(request_id, TaskState.RUNNING)
        if exit_file.exists():  # it ended between the two checks
            return self._status(request_id)
        if (directory / "stop").exists():
            # Stopped before the runner could record an exit code (signal during start-up,
            # or SIGKILL after the grace period): the stop is the cause, not a loss.
            return TaskStatus(request_id, TaskState.FAILED, 143, "stopped")
        return TaskStatus(request_id, TaskState.LOST, None, "the task's process is gone")

    def _kill(self, request_id: str, pid: int) -> None:
        if (self._dir(request_id) / "exit").exists():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)

    def _reap(self) -> None:
        with self._lock:
            finished = [rid for rid, child in self._children.items() if child.poll() is not None]
            for rid in finished:
                del self._children[rid]


def _is_young(pid_file: Path, pid: int, seconds: float = 5.0) -> bool:
    """Just started: /proc may still show the pre-exec command line for a moment."""
    try:
        age = pid_file.stat().st_mtime
        os.kill(pid, 0)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return bool(time.time() - age < seconds) and not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _is_runner(pid: int, request_id: str) -> bool:
    """The pid is alive and is our runner for this id (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    if not cmdline:
        return False  # a zombie
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    except (FileNotFoundError, IndexError):
        return False
    return request_id.encode() in cmdline
