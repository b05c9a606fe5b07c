"""The supervisor of one task process: ``python -m aipaas.backends.local.runner DIR -- CMD...``.

It runs in its own session (so it outlives a killed server), starts the command, forwards
SIGTERM/SIGINT to it and, when it ends, writes its exit code to DIR/exit atomically. A
directory with a pid but no exit file and no live runner is a task that was lost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: runner DIR -- COMMAND...", file=sys.stderr)
        return 2
    directory = Path(argv[0])
    command = argv[2:]
    try:
        child = subprocess.Popen(command)  # stdio, env and cwd are the runner's own
    except OSError as err:
        print(f"aipaas: cannot start {command[0]!r}: {err}", file=sys.stderr, flush=True)
        _write_exit(directory, 127)
        return 127

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
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
