"""A real S3 API for the dataset tests: moto's server, as a subprocess on a free port, with a
count of the requests it answered (so a test can tell that a read never reached S3).

Run as ``python -m tests.integration.s3_server PORT`` from the repository root: moto's server
application (``moto[server]``) behind a counting middleware; ``GET /_test/requests`` answers the
requests seen so far as JSON (method and path), ``DELETE /_test/requests`` forgets them. The
fixture side is ``S3Server``.
"""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.support.port_owner import serves_port

#: the repository root: where ``python -m tests.integration.s3_server`` finds its package
ROOT = Path(__file__).resolve().parents[2]
ACCESS_KEY = "test-access-key"
SECRET_KEY = "test-secret-key"
COUNT_PATH = "/_test/requests"
# PUT /_test/throttle?seconds=S: every GET's body comes a MiB at a time, S seconds apart (a
# test that must catch a copy in the middle); seconds=0 ends it.
THROTTLE_PATH = "/_test/throttle"
MIB = 1 << 20

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
App = Callable[[Environ, StartResponse], Iterable[bytes]]


def counting(app: App) -> App:
    seen: list[list[str]] = []
    lock = threading.Lock()
    pause = [0.0]  # seconds between two MiB of an object's body (THROTTLE_PATH sets it)

    def slowly(body: Iterable[bytes], seconds: float) -> Iterator[bytes]:
        for piece in body:
            for start in range(0, len(piece), MIB):
                time.sleep(seconds)
                yield piece[start : start + MIB]

    def wrapped(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "")
        if path == COUNT_PATH:
            with lock:
                body = json.dumps(seen).encode()
                if method == "DELETE":
                    seen.clear()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        if path == THROTTLE_PATH:
            pause[0] = float(environ.get("QUERY_STRING", "").removeprefix("seconds=") or 0)
            start_response("200 OK", [("Content-Type", "application/json")])
            return [b"{}"]
        with lock:
            seen.append([method, path])
        if method == "GET" and pause[0] > 0:
            return slowly(app(environ, start_response), pause[0])
        return app(environ, start_response)

    return wrapped


def serve(port: int) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import run_simple

    app = DomainDispatcherApplication(create_backend_app)
    run_simple("127.0.0.1", port, counting(app), threaded=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class S3Server:
    def __init__(self, port: int, log: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> S3Server:
        """Start moto and wait until it answers (a loaded machine imports it slowly). The port
        was free when chosen, but another process may take it before moto binds: then moto
        exits, and it starts again on a fresh port."""
        for _ in range(3):
            if self._start_once(timeout):
                return self
            self.port = _free_port()
            self.url = f"http://127.0.0.1:{self.port}"
        if self._start_once(timeout):
            return self
        raise RuntimeError(f"moto exited: {self.log.read_text()[-2000:]}")

    def _start_once(self, timeout: float) -> bool:
        """True once moto answers; False when it exited (its port taken)."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.s3_server", str(self.port)],
                cwd=ROOT,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                httpx.get(self.url + COUNT_PATH, timeout=5).raise_for_status()
                if serves_port(self.process.pid, self.port):  # not another worker's moto
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(60)

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
        )

    def requests(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p in httpx.get(self.url + COUNT_PATH, timeout=30).json()]

    def throttle(self, seconds: float) -> None:
        httpx.put(self.url + THROTTLE_PATH, params={"seconds": seconds}, timeout=30)

    def forget(self) -> None:
        httpx.delete(self.url + COUNT_PATH, timeout=30).raise_for_status()

    def upload(self, bucket: str, objects: dict[str, bytes]) -> str:
        """Put the objects (creating the bucket); the SHA-256 of them all, in key order."""
        client = self.client()
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        if bucket not in existing:
            client.create_bucket(Bucket=bucket)
        digest = hashlib.sha256()
        for key in sorted(objects):
            client.put_object(Bucket=bucket, Key=key, Body=objects[key])
            digest.update(objects[key])
        return digest.hexdigest()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
