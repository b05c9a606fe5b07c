"""The Ray actor that runs one task's command as a process on its node.

This module is shipped to the cluster by value (cloudpickle), so a Ray cluster runs it without
aipaas installed on its nodes: it imports the standard library only (and ``ray`` inside the
actor, which every Ray worker has). One detached actor per task attempt, named by its request
id; the command runs in its own session (so a stop reaches its whole process group) with the
parent-death signal set, so the command dies with the actor's worker when Ray kills it (a node
removed, an actor killed).

Methods never block: Ray runs them one at a time on the actor's thread, and a status call that
waited behind a slow one would look like a hung task.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from typing import Any

EXIT_NOT_STARTED = 127

# The supervisor between the actor and the command, leader of the task's process group, run
# twice nested: ``python -I -S -c SUPERVISOR PARENT SOURCE CMD...`` (the guard, the actor's
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


class TaskRunner:
    """Starts the command in ``__init__`` (creating the actor is starting the task)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        import ray  # present in every Ray worker; kept here so that the module imports alone

        # Ray's GPU ids for this actor (its own bookkeeping: fractions share an id).
        gpu_ids = [str(i) for i in ray.get_gpu_ids()]
        env = {str(k): str(v) for k, v in spec["env"].items()}
        if "AIPAAS_NODE_FILES" in env:  # a task's datasets: ray/datasets.py
            from aipaas.backends.ray.datasets import write_node_files

            write_node_files(env.pop("AIPAAS_NODE_FILES"))
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)  # "" hides every GPU
        self.gpu_ids = gpu_ids
        self.code: int | None = None
        self.stopped = False
        self.node_id = ray.get_runtime_context().get_node_id()
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
                self.child: subprocess.Popen[bytes] | None = subprocess.Popen(
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
                self.child = None
                self.code = EXIT_NOT_STARTED

    def info(self) -> dict[str, Any]:
        """What the task got: its pid, Ray's GPU ids and node (tests and the describe view)."""
        return {
            "pid": self.child.pid if self.child else None,
            "gpu_ids": self.gpu_ids,
            "node_id": self.node_id,
        }

    def poll(self) -> int | None:
        """The exit code once the command ended (killed by signal N: 128+N), else None."""
        if self.code is None and self.child is not None:
            code = self.child.poll()
            if code is not None:
                self.code = 128 - code if code < 0 else code
        return self.code

    def stop(self, grace_seconds: float) -> None:
        """SIGTERM to the command's process group, SIGKILL after ``grace_seconds``."""
        if self.child is None or self.poll() is not None:
            return
        self.stopped = True
        _signal_group(self.child.pid, signal.SIGTERM)
        timer = threading.Timer(grace_seconds, _signal_group, (self.child.pid, signal.SIGKILL))
        timer.daemon = True
        timer.start()

    def finish(self) -> None:
        """The end of the actor: whatever is left of the group is killed, then the actor exits
        (the backend has recorded the exit code)."""
        import ray

        if self.child is not None:
            _signal_group(self.child.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.child.wait(1)
        ray.actor.exit_actor()


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _private_parents(path: str) -> None:
    """The log's directory (the server's alone where it is on the server's host)."""
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        with contextlib.suppress(FileExistsError):
            os.makedirs(directory, mode=0o700)
