"""A loopback HTTP server the dataset tests read from, playing every part a source can play:

- ``/data/``: an index page linking ``file.txt`` (an ordinary http(s) source);
- ``/redirect/...``: 302 to the cloud metadata address (a redirect after the first URL);
- ``/endless/...``: index pages that link ``width`` new subdirectories each, without end,
  after ``delay`` seconds (a generated site whose listing never ends);
- ``/webhdfs/v1/...``: a WebHDFS namenode whose OPEN sends the reader on to a "datanode" at the
  metadata address (the protocol's own redirect);
- a request in absolute form (``GET http://...``): the server used as a proxy, recorded.

Every request's path is kept in ``requests`` (with the time it came) and proxied ones in
``proxied``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

METADATA = "http://169.254.169.254"
FILE_BODY = b"hello from the source\n"


class DatasetSite:
    def __init__(self, width: int = 40, delay: float = 0.0) -> None:
        self.width = width
        self.delay = delay
        self.requests: list[tuple[float, str]] = []
        self.proxied: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:
                self._answer(send_body=False)

            def do_GET(self) -> None:
                self._answer(send_body=True)

            def _answer(self, send_body: bool) -> None:
                outer.requests.append((time.monotonic(), self.path))
                if self.path.startswith(("http://", "https://")):
                    outer.proxied.append(self.path)
                    self._send(200, b"proxied\n", "text/plain", send_body)
                    return
                path = self.path.split("?")[0]
                if path.startswith("/webhdfs/v1/"):
                    self._webhdfs(path.removeprefix("/webhdfs/v1"), send_body)
                elif path.startswith("/redirect/"):
                    self.send_response(302)
                    self.send_header("Location", f"{METADATA}/latest/meta-data/")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif path == "/data/":
                    page = b'<html><body><a href="file.txt">file.txt</a></body></html>'
                    self._send(200, page, "text/html", send_body)
                elif path == "/data/file.txt":
                    self._send(200, FILE_BODY, "application/octet-stream", send_body)
                elif path.startswith("/endless/"):
                    if outer.delay:
                        time.sleep(outer.delay)
                    links = "".join(f'<a href="d{i}/">d{i}/</a>' for i in range(outer.width))
                    page = f"<html><body>{links}</body></html>".encode()
                    self._send(200, page, "text/html", send_body)
                else:
                    self._send(404, b"not found\n", "text/plain", send_body)

            def _webhdfs(self, path: str, send_body: bool) -> None:
                query = self.path.partition("?")[2]
                status: dict[str, object] = {
                    "accessTime": 0,
                    "blockSize": 134217728,
                    "group": "g",
                    "owner": "o",
                }
                status |= {"modificationTime": 0, "permission": "644", "replication": 1}
                if "op=OPEN" in query:
                    self.send_response(307)
                    self.send_header("Location", f"{METADATA}:9864/webhdfs/v1{path}?op=OPEN")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif "op=LISTSTATUS" in query:
                    entry = {**status, "pathSuffix": "file.bin", "type": "FILE", "length": 5}
                    answer = {"FileStatuses": {"FileStatus": [entry]}}
                    self._send(200, json.dumps(answer).encode(), "application/json", send_body)
                elif "op=GETFILESTATUS" in query:
                    is_file = path.endswith(".bin")
                    kind: dict[str, object] = {"type": "FILE", "length": 5}
                    if not is_file:
                        kind = {"type": "DIRECTORY"}
                    found = {"FileStatus": {**status, "pathSuffix": "", "length": 0, **kind}}
                    self._send(200, json.dumps(found).encode(), "application/json", send_body)
                else:
                    self._send(400, b"{}", "application/json", send_body)

            def _send(self, code: int, body: bytes, kind: str, send_body: bool) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if send_body:
                    self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def paths(self, prefix: str) -> list[str]:
        return [path for _, path in self.requests if path.startswith(prefix)]

    def last_request(self, prefix: str) -> float:
        return max((when for when, path in self.requests if path.startswith(prefix)), default=0.0)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
