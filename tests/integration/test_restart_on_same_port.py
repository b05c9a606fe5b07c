"""kill -9 of a server that had clients, then a new server on the same port at once: the
connections the dead server left (FIN_WAIT, TIME_WAIT) do not make the port look taken."""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.server_process import ServerProcess


def test_a_server_starts_on_its_port_right_after_a_kill_9(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        # Clients with keep-alive connections that stay open across the kill: the kernel closes
        # the server's ends, which then wait in FIN_WAIT/TIME_WAIT for a minute or more.
        clients = [server.http() for _ in range(4)]
        for client in clients:
            assert client.get("/whoami").status_code == 200
        server.kill9()
        began = time.monotonic()
        server._start_once(timeout=60)  # the same port: no fresh one on "address in use"
        took = time.monotonic() - began
        assert took < 30, f"the restart on port {server.port} took {took:.0f}s"
        with server.http() as client:
            assert client.get("/whoami").status_code == 200
        for client in clients:
            client.close()
    finally:
        server.close()
