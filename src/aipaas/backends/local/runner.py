"""The supervisor of one task process: ``python -I .../runner.py DIR``.

It runs in its own session (so it outlives a killed server) and as the server's user (root when
tasks are isolated: it must write the exit record in the root-only run directory). It reads
what to start from DIR/launch.json (written by the backend: command, environment, working
directory, uid and gid), starts the command as that user with no supplementary group, umask
077, in that directory (entered as the user, so a working directory the user may not enter is
refused by the system), forwards SIGTERM/SIGINT to it and, when it ends, writes its exit code to
DIR/exit atomically. A directory with a pid but no exit file and no live runner is a task that
was lost.

The runner's own environment is the backend's minimal one, not the task's: a job's variables
(PYTHONPATH, LD_PRELOAD...) never reach a process that runs as root. It is run as a file, not
as a module of the package, and imports the standard library only: it starts in tens of
milliseconds instead of the package's second, the window in which a stop could find it
without its signal handlers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import Any

LAUNCH_FILE = "launch.json"  # written by backend.py into DIR

UMASK = 0o077
EXIT_NOT_STARTED = 127


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: runner DIR (DIR holds launch.json)", file=sys.stderr)
        return 2
    directory = Path(argv[0])
    spec: dict[str, Any] = json.loads((directory / LAUNCH_FILE).read_text())
    command = [str(part) for part in spec["command"]]
    uid, gid = spec.get("uid"), spec.get("gid")
    cwd = str(spec["cwd"])

    stopped: list[int] = []
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child is None:
            stopped.append(signum)  # not started yet: it will not be, or be stopped at once
        elif child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)

    if stopped:  # stopped before anything started: nothing will
        _write_exit(directory, 128 + stopped[0])
        return 0

    def enter() -> None:
        # After the uid change (subprocess sets groups, gid, uid before this hook): the
        # directory is entered with the task's rights, not root's.
        try:
            os.chdir(cwd)
        except OSError as err:
            os.write(2, f"aipaas: cannot enter the working directory {cwd}: {err}\n".encode())
            os._exit(EXIT_NOT_STARTED)

    try:
        child = subprocess.Popen(  # stdio are the runner's own (the task's log)
            command,
            env={str(k): str(v) for k, v in spec["env"].items()},
            user=uid,
            group=gid,
            extra_groups=[] if uid is not None else None,
            umask=UMASK,
            preexec_fn=enter,  # the runner is single-threaded: the hook is safe here
        )
    except (OSError, subprocess.SubprocessError) as err:
        print(f"aipaas: cannot start {command[0]!r}: {err}", file=sys.stderr, flush=True)
        _write_exit(directory, EXIT_NOT_STARTED)
        return EXIT_NOT_STARTED
    if stopped:  # the stop came while it was being started
        child.send_signal(stopped[0])
    code = child.wait()
    if code < 0:
        code = 128 - code  # killed by signal N -> 128+N, as a shell reports it
    _write_exit(directory, code)
    return 0


def _write_exit(directory: Path, code: int) -> None:
    temporary = directory / "exit.tmp"
    temporary.write_text(f"{code}\n")
    os.replace(temporary, directory / "exit")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
