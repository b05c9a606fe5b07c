"""What the local backend checks and chooses before a task starts: whether the task's user can
run its program, and a MASTER_PORT free on this machine.

Who calls it: the local backend's ``start`` (backend.py). Reads the file system and binds a
socket for a moment; nothing else.

- The program: a task runs as its tenant's user with no supplementary group (isolation.py), so
  a program under the submitter's home (a virtualenv in /root) fails there with "Permission
  denied" and exit code 127, which tells the user nothing. ``program_problem`` finds the program
  as ``execvpe`` would (on the task's PATH unless it has a slash) and checks, with the user's
  uid and gid, every directory on the way (search) and the file (read or execute: a script
  needs both), so that the task is refused before it starts with a sentence that names the
  path and the user.
- MASTER_PORT: the controller proposes a port from the job's uid (controller/launch.py); here
  it moves to the first port from there that nothing on this machine listens on, chosen once
  per job and kept in ``<run dir>/ports/<job uid>``, so that every task of the job, started in
  the same cycle or restarted later beside a rank that already listens there, reads the same.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
import stat
from pathlib import Path

from aipaas.backends.base import MASTER_PORTS


def program_problem(program: str, path: str, uid: int, gid: int, cwd: str) -> str | None:
    """Why the user ``uid``:``gid`` cannot run ``program`` (None: it can, as far as modes
    tell). ``path``: the task's PATH; ``cwd``: where a relative path with a slash starts."""
    user = _user_name(uid)
    if "/" in program:
        named = program if program.startswith("/") else os.path.join(cwd, program)
        return _file_problem(Path(named), uid, gid, user)
    problems: list[str] = []
    for directory in path.split(os.pathsep):
        candidate = Path(directory or ".") / program
        if not candidate.exists():
            continue
        problem = _file_problem(candidate, uid, gid, user)
        if problem is None:
            return None
        problems.append(problem)
    if problems:
        return problems[0]
    return f"{program}: no such program on the task's PATH ({path}) for user {user}"


def _file_problem(path: Path, uid: int, gid: int, user: str) -> str | None:
    absolute = Path(os.path.abspath(path))
    for parent in reversed(absolute.parents):
        try:
            info = parent.stat()
        except OSError as err:
            return f"{path}: cannot be reached ({parent}: {err.strerror})"
        if not _allowed(info, uid, gid, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
            return (
                f"{path}: user {user} (uid {uid}) cannot enter {parent} (mode "
                f"{stat.S_IMODE(info.st_mode):04o}, owner {_user_name(info.st_uid)}); "
                "put the program where that user can reach it, or upload it with the job"
            )
    try:
        info = absolute.stat()  # follows a link: what exec would run
    except OSError as err:
        return f"{path}: {err.strerror.lower() if err.strerror else err}"
    if stat.S_ISDIR(info.st_mode):
        return f"{path}: is a directory, not a program"
    can_read = _allowed(info, uid, gid, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)
    can_run = _allowed(info, uid, gid, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)
    if not can_run or (not can_read and _is_script(absolute)):
        wanted = "execute" if not can_run else "read"
        return (
            f"{path}: user {user} (uid {uid}) cannot {wanted} it (mode "
            f"{stat.S_IMODE(info.st_mode):04o}, owner {_user_name(info.st_uid)})"
        )
    if absolute.is_symlink():  # the link's target's directories must be passable too
        return _file_problem(absolute.resolve(), uid, gid, user)
    return None


def _allowed(info: os.stat_result, uid: int, gid: int, owner: int, group: int, other: int) -> bool:
    if uid == 0:
        return bool(info.st_mode & (owner | group | other)) or stat.S_ISDIR(info.st_mode)
    if info.st_uid == uid:
        return bool(info.st_mode & owner)
    if info.st_gid == gid:
        return bool(info.st_mode & group)
    return bool(info.st_mode & other)


def _is_script(path: Path) -> bool:
    """Starts with ``#!`` (read by root here: the user's own read is what is checked)."""
    with contextlib.suppress(OSError), path.open("rb") as handle:
        return handle.read(2) == b"#!"
    return False


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def master_port(ports_dir: Path, job_uid: str, proposed: int) -> int:
    """The job's MASTER_PORT on this machine: the one chosen for it already, else the first
    port from ``proposed`` (within MASTER_PORTS, wrapping) that no one listens on, recorded."""
    record = ports_dir / job_uid.replace("/", "_")
    with contextlib.suppress(OSError, ValueError):
        return int(record.read_text().strip())
    start = proposed if proposed in MASTER_PORTS else MASTER_PORTS.start
    chosen = start
    for offset in range(len(MASTER_PORTS)):
        port = MASTER_PORTS.start + (start - MASTER_PORTS.start + offset) % len(MASTER_PORTS)
        if _free(port):
            chosen = port
            break
    ports_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = record.with_name(record.name + ".tmp")
    temporary.write_text(f"{chosen}\n")
    os.replace(temporary, record)
    return chosen


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("0.0.0.0", port))  # a probe, closed at once
        except OSError:
            return False
    return True
