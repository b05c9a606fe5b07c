"""A webhook receiver for the tests: a stdlib HTTP server on loopback that answers 500 to the
first ``failures`` requests and 200 to the rest, keeping what it accepted."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """An HTTP server that answers 500 to the first ``failures`` requests, then 200."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.accepted: list[tuple[dict[str, str], bytes]] = []
        self.refused = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if outer.refused < outer.failures:
                    outer.refused += 1
                    self.send_response(500)
                else:
                    outer.accepted.append((dict(self.headers.items()), body))
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
