"""The task after its datasets are staged on a cluster node (Slurm, Ray): ``python -I RUNNER DIR``.

data/stage.py becomes this process once the task's data is in the node's cache (exec: same pid,
so the lease it took stays live, and DIR, which names the request, is on its command line). It
reads the command and working directory from DIR/launch.json and runs the command with the
environment it was given (the Slurm job's or the Ray actor's: SLURM_*, CUDA_VISIBLE_DEVICES
and the task's variables are already there), forwards SIGTERM and SIGINT to it, writes its exit
code to DIR/exit and exits with it. Run as a file, standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

EXIT_NOT_STARTED = 127


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: node_runner DIR (DIR holds launch.json)", file=sys.stderr)
        return 2
    directory = Path(argv[0])
    spec = json.loads((directory / "launch.json").read_text())
    command = [str(part) for part in spec["command"]]
    child: subprocess.Popen[bytes] | None = None
    stopped: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child is None:
            stopped.append(signum)
        elif child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        child = subprocess.Popen(command, cwd=spec.get("cwd") or None)
    except OSError as err:
        print(f"aipaas: cannot start {command[0]!r}: {err}", file=sys.stderr, flush=True)
        return _exit(directory, EXIT_NOT_STARTED)
    if stopped:
        child.send_signal(stopped[0])
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:
            continue
    return _exit(directory, 128 - code if code < 0 else code)


def _exit(directory: Path, code: int) -> int:
    temporary = directory / "exit.tmp"
    temporary.write_text(f"{code}\n")
    os.replace(temporary, directory / "exit")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
