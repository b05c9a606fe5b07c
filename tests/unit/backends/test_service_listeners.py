"""Who listens on a port (/proc): a process of the given session, another process, or none."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

from aipaas.backends.local.listeners import session_listens

LISTENER = """
import socket, sys, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
print(server.getsockname()[1], flush=True)
time.sleep(60)
"""


def test_a_session_listening_on_a_port_is_told_from_another() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", LISTENER], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        assert session_listens(port, child.pid) is True  # its own session: the child's pid
        assert session_listens(port, 1) is False  # another session holds no such socket
    finally:
        child.kill()
        child.wait()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
        # checked while bound here: no other process can be listening on it meanwhile
        assert session_listens(free, child.pid) is None  # bound, not listening: nobody listens
    deadline = time.monotonic() + 60
    while session_listens(port, child.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert session_listens(port, child.pid) is None
