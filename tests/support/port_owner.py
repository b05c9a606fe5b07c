"""Whether a process (or one of its children) is the one listening on a port: a test server
is ready only when what answers on its port is itself. A port is chosen free and bound later;
in between another xdist worker's server may take it and answer the readiness check (Linux's
/proc; elsewhere the check cannot be made and passes)."""

from __future__ import annotations

from pathlib import Path

LISTEN = "0A"  # the TCP state in /proc/net/tcp


def serves_port(pid: int, port: int) -> bool:
    inodes = _listening_inodes(port)
    if inodes is None:
        return True  # no /proc here: nothing to tell
    return any(_holds(each, inodes) for each in [pid, *_children(pid)])


def _listening_inodes(port: int) -> set[str] | None:
    found: set[str] = set()
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for row in rows:
            fields = row.split()
            listening = len(fields) > 9 and fields[3] == LISTEN
            if listening and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(fields[9])
    return found if readable else None


def _holds(pid: int, inodes: set[str]) -> bool:
    wanted = {f"socket:[{inode}]" for inode in inodes}
    try:
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for descriptor in descriptors:
        try:
            if str(descriptor.readlink()) in wanted:
                return True
        except OSError:
            continue
    return False


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found
