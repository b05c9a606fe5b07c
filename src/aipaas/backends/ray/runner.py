"""The Ray task that runs one task's command as a process on its node (``run_task``).

This module is shipped to the cluster by value (cloudpickle), so a Ray cluster runs it without
aipaas installed on its nodes: it imports the standard library only (and ``ray`` inside the
task, which every Ray worker has). A plain Ray task, not an actor: Ray reuses its workers for
tasks (an actor takes a new worker process, about a second of CPU each on a small machine). The
task is submitted and owned by the backend's detached supervisor actor (supervisor.py), which
outlives the server; it runs in its bundle of the gang's placement group and returns the
command's exit code once the command ended. The command runs in its own session (so a stop
reaches its whole process group) under a small supervisor that kills the group when the Ray
worker dies (a node removed, the task cancelled with force).

A stop comes from the supervisor actor: the task holds a pending call (``wait_stop``) that it
answers with the grace period; the task then sends SIGTERM to the group and SIGKILL after the
grace. Whatever is left of the group when the command ended is killed before the task returns
(the worker goes back to Ray's pool for the next task).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import Any

EXIT_NOT_STARTED = 127
#: how often the task looks for a stop while its command runs (its end is seen at once)
STOP_CHECK_SECONDS = 0.25

# The supervisor between the Ray worker and the command, leader of the task's process group, run
# twice nested: ``python -I -S -c SUPERVISOR PARENT SOURCE CMD...`` (the guard, the worker's
# child) starts ``python -I -S -c SUPERVISOR GUARD '' CMD...`` (the keeper), which starts the
# command. Both watch their parent: when it is gone (the kernel's parent-death signal, or a
# check every second) they kill the whole group, grandchildren included. Two levels because
# Ray, when a worker exits, SIGKILLs the worker's own children: the guard dies, and the keeper,
# which Ray does not touch, takes the group down. A SIGTERM while the parent lives is a stop
# sent to the group, which reaches the command too: they then only wait for it. Each exits
# with the command's code (signal N: 128+N).
SUPERVISOR = """
import ctypes, os, signal, subprocess, sys
parent, source, command = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
def orphaned():
    return os.getppid() != parent
def end_all():
    os.killpg(0, signal.SIGKILL)
def on_term(signum, frame):
    if orphaned():
        end_all()
signal.signal(signal.SIGTERM, on_term)
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
if orphaned():
    end_all()
if source:
    command = [sys.executable, "-I", "-S", "-c", source, str(os.getpid()), "", *command]
try:
    child = subprocess.Popen(command)
except OSError as err:
    print(f"aipaas: cannot start {command[0]!r}: {err}", file=sys.stderr, flush=True)
    sys.exit(127)
while True:
    try:
        code = child.wait(1)
        break
    except subprocess.TimeoutExpired:
        if orphaned():
            end_all()
    except InterruptedError:
        continue
sys.exit(128 - code if code < 0 else code)
"""


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
    supervisor.started.remote(request_id, info)  # answered by no one: a notice
    if child is None:
        return EXIT_NOT_STARTED
    stop_ref = supervisor.wait_stop.remote(request_id)
    kill_at: float | None = None
    try:
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = child.wait(STOP_CHECK_SECONDS)
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


def _start(spec: dict[str, Any], env: dict[str, str]) -> subprocess.Popen[bytes] | None:
    log_path = str(spec["log_path"])
    _private_parents(log_path)
    cwd = str(spec["cwd"])
    os.makedirs(cwd, mode=0o700, exist_ok=True)
    command = [str(part) for part in spec["command"]]
    supervised = [sys.executable, "-I", "-S", "-c", SUPERVISOR, str(os.getpid()), SUPERVISOR]
    supervised += command
    with open(log_path, "ab") as log:
        os.fchmod(log.fileno(), 0o600)
        try:
            return subprocess.Popen(
                supervised,
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
