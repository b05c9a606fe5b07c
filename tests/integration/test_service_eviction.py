"""An evicted service replica with real processes (local backend, `aipaas server`): a
preemptible replica of a low-priority service is answering a slow request when a job of higher
priority needs its CPUs. The replica's server dies at once on SIGTERM, as a server that never
learnt to shut down gracefully does. With ``onEviction: Drain`` (the default) the request is
answered (the replica left the endpoints and was stopped only after ``drainSeconds``); with
``onEviction: Stop`` the same request is cut. Then the preemptor runs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server_process import ADMIN, SETUP, TASK_PYTHON, ServerProcess, shared_dir

REPLICA = r"""
import json, os, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        url = urlparse(self.path)
        time.sleep(float(parse_qs(url.query).get("s", ["0"])[0]))
        data = json.dumps({"pid": os.getpid()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""
#: the slow request: far longer than a controller cycle, shorter than the drain
REQUEST_SECONDS = 6
DRAIN_SECONDS = 10


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    server = ServerProcess(tmp_path_factory.mktemp("eviction") / "data").start()
    script = shared_dir() / "replica.py"
    script.write_text(REPLICA)
    script.chmod(0o644)
    with server.http() as client:
        client.post("/apply", content=SETUP).raise_for_status()
    try:
        yield server, script
    finally:
        server.close()


def node_cpu_milli(server: ServerProcess) -> int:
    with server.http() as client:
        nodes = client.get("/nodes").json()["items"]
    cpus = [str(node["spec"]["cpu"]) for node in nodes]
    return min(int(c[:-1]) if c.endswith("m") else int(float(c) * 1000) for c in cpus)


def apply(server: ServerProcess, manifest: dict[str, Any]) -> None:
    with server.http() as client:
        answer = client.post("/apply", content=json.dumps(manifest))
        assert answer.status_code in (200, 201), answer.text


def wait_for(what: str, check: Callable[[], bool], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def ready(server: ServerProcess, name: str) -> bool:
    with server.http() as client:
        found = client.get(f"/services/{name}", params={"tenant": "acme"}).json()
    return bool((found.get("status") or {}).get("readyReplicas") == 1)


def job_phase(server: ServerProcess, name: str) -> str:
    with server.http() as client:
        answer = client.get(f"/jobs/{name}", params={"tenant": "acme"})
    if answer.status_code != 200:
        return "Missing"
    return str((answer.json().get("status") or {}).get("phase", "Pending"))


def evict_during_a_request(server: ServerProcess, script: Path, name: str, policy: str) -> int:
    """The status of a slow request through the entry point to a replica evicted meanwhile
    (0: the connection was cut)."""
    cpu = f"{node_cpu_milli(server) * 3 // 4}m"  # two of these never fit one node
    service = {
        "apiVersion": "aipaas/v1",
        "kind": "Service",
        "metadata": {"name": name, "tenant": "acme"},
        "spec": {
            "queue": "research",
            "priorityClassName": "low",
            "preemptible": True,
            "replicas": 1,
            "drainSeconds": DRAIN_SECONDS,
            "onEviction": policy,
            "template": {"command": [TASK_PYTHON, str(script)], "resources": {"cpu": cpu}},
        },
    }
    apply(server, service)
    wait_for("a ready replica", lambda: ready(server, name))
    codes: list[int] = []

    def ask() -> None:
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60
        ) as client:
            try:
                codes.append(client.get(f"/services/acme/{name}/?s={REQUEST_SECONDS}").status_code)
            except httpx.HTTPError:
                codes.append(0)

    asking = threading.Thread(target=ask)
    asking.start()
    time.sleep(1.0)  # the request is with the replica
    preemptor = f"{name}-urgent"
    job = {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "metadata": {"name": preemptor, "tenant": "acme"},
        "spec": {
            "queue": "research",
            "priorityClassName": "normal",
            "tasks": [{"name": "main", "command": ["sleep", "2"], "resources": {"cpu": cpu}}],
        },
    }
    apply(server, job)
    asking.join(timeout=90)
    wait_for("the preemptor to run", lambda: job_phase(server, preemptor) != "Pending", 120)
    with server.http() as client:
        client.delete(f"/services/{name}", params={"tenant": "acme"})
    return codes[0]


def test_a_draining_evicted_replica_answers_the_request_it_was_sent(
    world: tuple[ServerProcess, Path],
) -> None:
    server, script = world
    assert evict_during_a_request(server, script, "drained", "Drain") == 200


def test_without_the_drain_the_evicted_replicas_request_is_cut(
    world: tuple[ServerProcess, Path],
) -> None:
    server, script = world
    assert evict_during_a_request(server, script, "stopped", "Stop") != 200
