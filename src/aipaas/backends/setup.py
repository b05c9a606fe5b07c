"""A job's ``spec.setup``: shell commands run once per node before its tasks start there.

Who calls it: the local backend's ``start`` (its runner runs the script before the task, on the
host or in the task's image) and the Slurm backend's batch script. Pure: it builds the script
and the cache key; it runs nothing.

The commands run in order with ``/bin/sh -c``, as the task's user, in the task's working
directory (where an uploaded workdir was unpacked: ``pip install -r requirements.txt`` finds
its file), with the task's environment and ``AIPAAS_SETUP_DIR``: a directory kept for them
across the job's tasks and attempts on the node (``python3 -m venv $AIPAAS_SETUP_DIR/venv``).
The directory is named by ``setup_key``, the digest of the commands, the workdir and the image,
so another job with the same three reuses what the first set up. The first task on a node runs
them while the others wait on a lock (flock(1), or an atomic mkdir where the image has no
flock, as busybox has not); a ``.done`` mark ends the wait for every later one. A failing
command fails the task: the script says which command failed with which code, and exits with
``SETUP_FAILED_CODE``, which the backends read as "setup failed" (and say so in the task's
status); the mark is not written, so the next task or attempt runs the commands again.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Sequence

#: the variable naming the setup's directory, in the setup's and the task's environment
SETUP_DIR_VARIABLE = "AIPAAS_SETUP_DIR"
#: the script's exit code when a command failed (the task's command never ran)
SETUP_FAILED_CODE = 121
DONE_MARK = ".done"
LOCK_FILE = ".lock"
#: the lock where the image has no flock(1): a directory, made atomically
LOCK_DIR = ".lockdir"
LOCK_TAKEOVER_SECONDS = 600


def setup_key(commands: Sequence[str], workdir: str | None, image: str | None) -> str:
    """The name of the setup's directory: what it ran, on which code, in which image."""
    text = json.dumps({"commands": list(commands), "workdir": workdir, "image": image})
    return "setup-" + hashlib.sha256(text.encode()).hexdigest()[:32]


def setup_script(commands: Sequence[str]) -> str:
    """A POSIX shell script that runs ``commands`` once in ``$AIPAAS_SETUP_DIR``."""
    lines = [
        f'dir="${SETUP_DIR_VARIABLE}"',
        f'[ -e "$dir/{DONE_MARK}" ] && exit 0',
        'mkdir -p "$dir" || exit ' + str(SETUP_FAILED_CODE),
        # the node's other tasks of the job wait here for the first one's setup
        "if command -v flock >/dev/null 2>&1; then",
        f'  exec 9>>"$dir/{LOCK_FILE}" && flock 9',
        "else",
        # no flock (a busybox image): mkdir is atomic; a holder gone for LOCK_TAKEOVER_SECONDS
        # (killed while it held the lock) is taken over
        "  waited=0",
        f'  until mkdir "$dir/{LOCK_DIR}" 2>/dev/null; do',
        f'    [ -e "$dir/{DONE_MARK}" ] && exit 0',
        f'    if [ "$waited" -ge {LOCK_TAKEOVER_SECONDS} ]; then',
        f'      rmdir "$dir/{LOCK_DIR}" 2>/dev/null; waited=0',
        "    fi",
        "    sleep 1; waited=$((waited + 1))",
        "  done",
        f"  trap 'rmdir \"$dir/{LOCK_DIR}\" 2>/dev/null' EXIT",
        "fi",
        f'[ -e "$dir/{DONE_MARK}" ] && exit 0',
    ]
    total = len(commands)
    for index, command in enumerate(commands, start=1):
        quoted = shlex.quote(command)
        shown = shlex.quote(_one_line(command))
        lines += [
            f"printf 'aipaas: setup %s: %s\\n' {index}/{total} {shown}",
            f"/bin/sh -c {quoted}",
            "code=$?",
            'if [ "$code" -ne 0 ]; then',
            "  printf 'aipaas: setup failed: command %s (%s) exited with code %s\\n' "
            f'{index}/{total} {shown} "$code"',
            f"  exit {SETUP_FAILED_CODE}",
            "fi",
        ]
    lines.append(f'touch "$dir/{DONE_MARK}"')
    return "\n".join(lines) + "\n"


def failure_message(code: int) -> str:
    return (
        f"setup failed: a spec.setup command exited with an error (exit code {code}); "
        "the task's log says which"
    )


def _one_line(command: str) -> str:
    line = " ".join(command.split())
    return line if len(line) <= 120 else line[:117] + "..."
