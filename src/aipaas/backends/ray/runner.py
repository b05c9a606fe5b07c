"""The Ray task that runs one task's command as a process on its node (``run_task``).

This module is shipped to the cluster by value (cloudpickle), so a Ray cluster runs it without
aipaas installed on its nodes: it imports the standard library only (and ``ray`` inside the
task, which every Ray worker has). A plain Ray task, not an actor: Ray reuses its workers for
tasks (an actor takes a new worker process, about a second of CPU each on a small machine). The
task is submitted and owned by the backend's detached supervisor actor (supervisor.py), which
outlives the server; it runs in its bundle of the gang's placement group and returns the
command's exit code once the command ended. The command runs in its own session (so a stop
reaches its whole process group), the worker's child; the worker's *keeper* kills the group
when the Ray worker dies (a node removed, the task cancelled with force).

A stop comes from the supervisor actor: the task holds a pending call (``wait_stop``) that it
answers with the grace period; the task then sends SIGTERM to the group and SIGKILL after the
grace. Whatever is left of the group when the command ended is killed before the task returns
(the worker goes back to Ray's pool for the next task).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

EXIT_NOT_STARTED = 127
#: how often the task looks for a stop while its command runs (its end is seen at once)
STOP_CHECK_SECONDS = 0.25

# The keeper: one small process per Ray worker (started at its first task, ``_keeper``), not
# the worker's child (it forks and its parent exits at once: Ray, when a worker exits, SIGKILLs
# the worker's own children, and the command's grandchildren would outlive them), in a session
# of its own. The worker tells it, on a pipe only the worker writes, the process group of each
# command it starts (``+PGID``) and ends (``-PGID``); when the worker dies, however it dies
# (SIGKILL included), the pipe reads end-of-file and the keeper SIGKILLs the groups still
# registered, then exits. Why one per worker and not a supervisor process per task (two
# nested Python processes per task before, as the command's parents): a burst of short tasks
# on a small machine is CPU-bound, and they were half the CPU of each task (~20 ms of 45).
KEEPER = """
import os, sys, _signal
if os.fork():
    os._exit(0)
fd, groups, buffer = int(sys.argv[1]), set(), b""
while True:
    try:
        data = os.read(fd, 4096)
    except InterruptedError:
        continue
    if not data:
        break
    *lines, buffer = (buffer + data).split(b"\\n")
    for line in lines:
        if line.startswith(b"-"):
            groups.discard(int(line[1:]))
        else:
            groups.add(int(line))
for group in groups:
    try:
        os.killpg(group, _signal.SIGKILL)
    except OSError:
        pass
"""
#: where a worker keeps its keeper's pipe (its write end), between the tasks it runs
KEEPER_ATTRIBUTE = "_aipaas_ray_keeper"


def run_task(supervisor: Any, request_id: str, spec: dict[str, Any]) -> int:
    """Runs the command to its end and returns its exit code (killed by signal N: 128+N)."""
    import ray  # present in every Ray worker; kept here so that the module imports alone

    # Ray's GPU ids for this task (its own bookkeeping: fractions share an id).
    gpu_ids = [str(i) for i in ray.get_gpu_ids()]
    env = {str(k): str(v) for k, v in spec["env"].items()}
    if "AIPAAS_NODE_FILES" in env:  # a task's datasets: ray/datasets.py
        from aipaas.backends.ray.datasets import write_node_files

        write_node_files(env.pop("AIPAAS_NODE_FILES"))
    env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)  # "" hides every GPU
    child = _start(spec, env)
    info = {
        "pid": child.pid if child else None,
        "gpu_ids": gpu_ids,
        "node_id": ray.get_runtime_context().get_node_id(),
    }
    if child is None:
        supervisor.started.remote(request_id, info)  # answered by no one: a notice
        return EXIT_NOT_STARTED
    _tell_keeper(f"{child.pid}\n")
    # One call tells the supervisor the task started and waits for a stop (its answer).
    stop_ref = supervisor.wait_stop.remote(request_id, info)
    kill_at: float | None = None
    watch = _exit_watch(child.pid)
    try:
        while True:
            code = _wait(child, watch, STOP_CHECK_SECONDS)
            if code is not None:
                return 128 - code if code < 0 else code
            if kill_at is None and ray.wait([stop_ref], timeout=0)[0]:
                grace = ray.get(stop_ref)
                if grace is not None:
                    _signal_group(child.pid, signal.SIGTERM)
                    kill_at = time.monotonic() + float(grace)
            if kill_at is not None and time.monotonic() >= kill_at:
                _signal_group(child.pid, signal.SIGKILL)
    finally:
        _signal_group(child.pid, signal.SIGKILL)  # what is left of the group (and on a cancel)
        _tell_keeper(f"-{child.pid}\n")
        if watch is not None:
            os.close(watch)


def _tell_keeper(line: str) -> None:
    """Tells this worker's keeper (started when there is none, or a new one when it is gone)."""
    for _ in range(2):
        fd: int | None = getattr(sys, KEEPER_ATTRIBUTE, None)
        if fd is None:
            fd = _start_keeper()
        try:
            os.write(fd, line.encode())
            return
        except OSError:  # the keeper is gone: a new one (one task runs at a time here)
            with contextlib.suppress(OSError):
                os.close(fd)
            setattr(sys, KEEPER_ATTRIBUTE, None)


def _start_keeper() -> int:
    read, write = os.pipe()  # neither end inherited by the commands (not inheritable)
    try:
        starter = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", KEEPER, str(read)],
            pass_fds=(read,),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
        )
        starter.wait()  # it forked the keeper and exited
    finally:
        os.close(read)
    setattr(sys, KEEPER_ATTRIBUTE, write)
    return write


def _exit_watch(pid: int) -> int | None:
    """A descriptor that becomes readable when the process ends (Linux's pidfd): its end is
    seen at once, where ``Popen.wait`` with a timeout polls (up to 50 ms late)."""
    with contextlib.suppress(AttributeError, OSError):
        return os.pidfd_open(pid)
    return None


def _wait(child: subprocess.Popen[bytes], watch: int | None, seconds: float) -> int | None:
    """The child's exit code once it ended, else None after at most ``seconds``."""
    if watch is None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return child.wait(seconds)
        return None
    select.select([watch], [], [], seconds)
    return child.poll()


def _start(spec: dict[str, Any], env: dict[str, str]) -> subprocess.Popen[bytes] | None:
    log_path = str(spec["log_path"])
    _private_parents(log_path)
    cwd = str(spec["cwd"])
    os.makedirs(cwd, mode=0o700, exist_ok=True)
    command = [str(part) for part in spec["command"]]
    with open(log_path, "ab") as log:
        os.fchmod(log.fileno(), 0o600)
        try:
            return subprocess.Popen(
                command,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as err:
            log.write(f"aipaas: cannot start {command[0]!r}: {err}\n".encode())
            return None


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _private_parents(path: str) -> None:
    """The log's directory (the server's alone where it is on the server's host)."""
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        with contextlib.suppress(FileExistsError):
            os.makedirs(directory, mode=0o700)
