"""Who listens on a TCP port of this machine, from /proc (Linux): the sockets in LISTEN state
on the port (/proc/net/tcp, tcp6), then whether a process of a given session holds one of
them (a local task runs in its runner's session: the session id is the runner's pid)."""

from __future__ import annotations

import os
from pathlib import Path

LISTEN = "0A"


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[str]:
    found: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(fields[9])
    return found


def _session(pid: str, proc: Path) -> int | None:
    try:
        stat = (proc / pid / "stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def _holds(pid: str, sockets: set[str], proc: Path) -> bool:
    try:
        fds = os.listdir(proc / pid / "fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(proc / pid / "fd" / fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in sockets:
            return True
    return False


def session_listens(port: int, session: int, proc: Path = Path("/proc")) -> bool | None:
    """True: a process of ``session`` listens on ``port``; False: only others do; None:
    nothing listens there."""
    sockets = listening_inodes(port, proc)
    if not sockets:
        return None
    for entry in os.listdir(proc):
        if entry.isdigit() and _session(entry, proc) == session and _holds(entry, sockets, proc):
            return True
    return False
