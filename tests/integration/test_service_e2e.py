"""Services on the local backend with real processes: a small standard-library HTTP server
answers through the entry point; it scales up under a load generator and back; scaled to zero
it answers the first request after a cold start; a rolling update drops no request; a replica
that fails its liveness probe is replaced. One server for the module; a service per test."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server_process import ADMIN, SETUP, TASK_PYTHON, ServerProcess, shared_dir

REPLICA = r"""
import json, os, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

sick = threading.Event()
# A model server's start: listening at once, ready (and live) only once "loaded".
LOADED_AT = time.time() + float(os.environ.get("LOAD_SECONDS", "0"))

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urlparse(self.path)
        loading = time.time() < LOADED_AT
        if url.path == "/live" and (sick.is_set() or loading):
            return self.answer(500, {"sick": sick.is_set(), "loading": loading})
        if url.path == "/ready" and loading:
            return self.answer(503, {"loading": True})
        if url.path == "/never":
            return self.answer(404, {})
        if url.path == "/whoami":
            seen = os.path.join(os.environ["HOME"], "probe-uid")
            probe = open(seen).read().strip() if os.path.exists(seen) else ""
            return self.answer(200, {"uid": str(os.getuid()), "probe": probe})
        if url.path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            for index in range(4):
                self.wfile.write(f"token {index}\n".encode())
                self.wfile.flush()
                time.sleep(1.0)  # far apart: the test tells streamed from buffered
            return
        if url.path == "/page":
            page = b"<script>alert(sessionStorage.getItem('aipaas-token'))</script>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Set-Cookie", "sid=stolen; Path=/")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return
        if url.path == "/sicken":
            sick.set()
        if url.path == "/slow":
            time.sleep(float(parse_qs(url.query).get("s", ["0.2"])[0]))
        self.answer(200, {"version": os.environ.get("VERSION", "1"), "pid": os.getpid(),
                          "path": self.path, "token": self.headers.get("Authorization")})

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass

try:
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
except OSError:
    if os.environ.get("HANG_IF_PORT_TAKEN"):  # a replica slow to listen, as a hung one is
        time.sleep(3600)
    raise
server.serve_forever()
"""

SERVICE = "aipaas.dev/service"
OTHER_TENANT = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: globex}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: globex}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: gus, tenant: globex}
spec: {role: tenant-admin}
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    server = ServerProcess(tmp_path_factory.mktemp("services") / "data").start()
    script = shared_dir() / "replica.py"
    script.write_text(REPLICA)
    script.chmod(0o644)
    with server.http() as client:
        for manifest in (SETUP, OTHER_TENANT):
            client.post("/apply", content=manifest).raise_for_status()
    try:
        yield server, script
    finally:
        server.close()


def apply_service(server: ServerProcess, script: Path, name: str, **spec: Any) -> None:
    template = {"command": [TASK_PYTHON, str(script)], "resources": {"cpu": "100m"}}
    template.update(spec.pop("template", {}))
    body = {"queue": "research", "template": template, "drainSeconds": 1, **spec}
    manifest = {
        "apiVersion": "aipaas/v1",
        "kind": "Service",
        "metadata": {"name": name, "tenant": "acme"},
        "spec": body,
    }
    with server.http() as client:
        answer = client.post("/apply", content=json.dumps(manifest))
        assert answer.status_code in (200, 201), answer.text


def service(server: ServerProcess, name: str) -> dict[str, Any]:
    with server.http() as client:
        answer = client.get(f"/services/{name}", params={"tenant": "acme"})
        answer.raise_for_status()
        found: dict[str, Any] = answer.json()
        return found


def status(server: ServerProcess, name: str) -> dict[str, Any]:
    found: dict[str, Any] = service(server, name).get("status") or {}
    return found


def wait_for(what: str, check: Callable[[], bool], timeout: float = 90, every: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def events(server: ServerProcess, name: str) -> list[dict[str, Any]]:
    with server.http() as client:
        answer = client.get("/events", params={"kind": "Service", "name": name, "tenant": "acme"})
        answer.raise_for_status()
        items: list[dict[str, Any]] = answer.json()["items"]
        return items


def entry(server: ServerProcess, token: str = ADMIN, timeout: float = 90) -> httpx.Client:
    return httpx.Client(
        base_url=server.url + "/services/acme",
        headers={"Authorization": f"Bearer {token}"},
        timeout=timeout,
    )


class LoadGenerator:
    """``workers`` threads sending requests in a loop; every answer's status is kept."""

    def __init__(self, server: ServerProcess, path: str, workers: int) -> None:
        self.server, self.path, self.workers = server, path, workers
        self.codes: list[int] = []
        self.bodies: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(workers)]

    def __enter__(self) -> LoadGenerator:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _run(self) -> None:
        with entry(self.server) as client:
            while not self._stop.is_set():
                try:
                    answer = client.get(self.path)
                    self.codes.append(answer.status_code)
                    if answer.status_code == 200:
                        self.bodies.append(answer.json())
                except httpx.HTTPError:
                    self.codes.append(0)


def test_a_service_answers_through_the_entry_point_for_its_tenant_only(
    world: tuple[ServerProcess, Path],
) -> None:
    server, script = world
    apply_service(server, script, "hello")
    wait_for("a ready replica", lambda: status(server, "hello").get("readyReplicas") == 1)
    with entry(server) as client:
        answer = client.get("/hello/some/path?x=1")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["path"] == "/some/path?x=1"
    assert body["token"] is None  # the caller's aipaas token is not passed on
    assert httpx.get(server.url + "/services/acme/hello/").status_code == 401
    with server.http() as client:
        client.post("/apply", content=OTHER_TENANT).raise_for_status()
        gus = client.post("/tokens", json={"user": "gus", "tenant": "globex"}).json()["token"]
    with entry(server, gus) as client:
        assert client.get("/hello/").status_code == 404  # another tenant's service is not seen
    with entry(server) as client:
        assert client.get("/missing/").status_code == 404
        # A page a replica serves shares the API's origin: it is sandboxed, sets no cookie.
        page = client.get("/hello/page")
    assert page.status_code == 200 and "<script>" in page.text
    assert "set-cookie" not in page.headers
    policy = page.headers["content-security-policy"]
    assert policy.startswith("sandbox") and "allow-same-origin" not in policy
    # The replica is a job of the service's queue: it counts like any job.
    with server.http() as client:
        jobs = client.get("/jobs", params={"tenant": "acme"}).json()["items"]
    replicas = [j for j in jobs if j["metadata"]["labels"].get("aipaas.dev/service") == "hello"]
    assert len(replicas) == 1
    assert replicas[0]["spec"]["queue"] == "research"
    assert replicas[0]["spec"]["preemptible"] is False
    table = server.cli("get", "services", "--tenant", "acme").stdout.splitlines()
    assert table[0].split()[:5] == ["NAME", "TENANT", "READY", "PHASE", "URL"]
    row = next((line.split() for line in table if line.strip().startswith("hello")), table)
    assert row[2:5] == ["1/1", "Running", f"{server.url}/services/acme/hello/"]
    described = server.cli("describe", "service", "hello", "--tenant", "acme").stdout
    assert "replicaJobs:" in described and "Scaled" in described


def test_it_scales_up_under_load_and_back_down(world: tuple[ServerProcess, Path]) -> None:
    server, script = world
    autoscaling = {
        "target": 1,
        "stableWindowSeconds": 3,
        "panicWindowSeconds": 1,
        "scaleDown": {"stabilizationWindowSeconds": 2, "periodSeconds": 1},
    }
    apply_service(server, script, "busy", minReplicas=1, maxReplicas=4, autoscaling=autoscaling)
    wait_for("a ready replica", lambda: status(server, "busy").get("readyReplicas") == 1)
    with LoadGenerator(server, "/busy/slow?s=0.3", workers=6) as load:
        wait_for(
            "more ready replicas under load",
            lambda: status(server, "busy").get("readyReplicas", 0) >= 3,
            timeout=120,
        )
    assert load.codes and set(load.codes) == {200}
    wait_for("back to one replica", lambda: status(server, "busy").get("replicas") == 1, 120)
    scaled = [e for e in events(server, "busy") if e["reason"] == "Scaled"]
    assert any("-> 4" in e["message"] or "-> 3" in e["message"] for e in scaled), scaled
    assert "target 1 per replica" in scaled[-1]["message"]  # each decision with its numbers
    assert scaled[-1]["message"].split(":")[0].endswith("-> 1 replicas")
    exposition = httpx.get(
        server.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"}
    ).text
    series = 'aipaas_service_replicas{service="busy",state="desired",tenant="acme"}'
    assert f"{series} 1.0" in exposition, [s for s in exposition.splitlines() if "service_" in s]


def test_scaled_to_zero_it_answers_the_first_request(world: tuple[ServerProcess, Path]) -> None:
    server, script = world
    autoscaling = {
        "target": 1,
        "stableWindowSeconds": 2,
        "panicWindowSeconds": 1,
        "scaleDown": {"stabilizationWindowSeconds": 1},
    }
    # The entry point holds the first request through the cold start (a replica started and
    # found ready), up to queueTimeoutSeconds (5 minutes by default). With metric rps: only
    # answered requests make a rate, so it is the waiting request that wakes the service.
    apply_service(
        server,
        script,
        "sleepy",
        minReplicas=0,
        maxReplicas=2,
        autoscaling={**autoscaling, "metric": "rps"},
    )
    wait_for("scaled to zero", lambda: status(server, "sleepy").get("phase") == "Idle")
    assert status(server, "sleepy").get("endpoints", []) == []
    with entry(server, timeout=180) as client:
        answer = client.get("/sleepy/")
    assert answer.status_code == 200, answer.text
    assert status(server, "sleepy").get("readyReplicas") == 1


def test_a_rolling_update_drops_no_request(world: tuple[ServerProcess, Path]) -> None:
    server, script = world
    rolling = {"maxSurge": 1, "maxUnavailable": 0}
    apply_service(server, script, "steady", minReplicas=2, rollingUpdate=rolling)
    wait_for("two ready replicas", lambda: status(server, "steady").get("readyReplicas") == 2)
    first_revision = status(server, "steady")["revision"]
    with LoadGenerator(server, "/steady/slow?s=0.05", workers=4) as load:
        time.sleep(1)
        apply_service(
            server,
            script,
            "steady",
            minReplicas=2,
            rollingUpdate=rolling,
            template={"env": {"VERSION": "2"}},
        )

        def rolled() -> bool:
            found = status(server, "steady")
            revision = found.get("revision")
            if revision == first_revision:
                return False  # the controller has not seen the new template yet
            endpoints = found.get("endpoints", [])
            return (
                len(endpoints) == 2
                and all(e["revision"] == revision for e in endpoints)
                and (found.get("replicas") == 2)
            )

        wait_for("the new revision everywhere", rolled, timeout=120)
        # The old replicas drain and stop under load: answers come from the new one only.
        wait_for(
            "answers from the new revision (and more than 50 in all)",
            lambda: (
                len(load.codes) > 50 and [b["version"] for b in load.bodies[-20:]] == ["2"] * 20
            ),
        )
    assert len(load.codes) > 50
    assert [c for c in load.codes if c != 200] == []
    versions = [b["version"] for b in load.bodies]
    assert versions[0] == "1" and versions[-1] == "2"


def test_a_replica_failing_its_liveness_probe_is_replaced(
    world: tuple[ServerProcess, Path],
) -> None:
    server, script = world
    # A generous timeout: on a loaded machine a 1 s probe of a healthy replica can time out,
    # and each restart now waits longer (10 s, 20 s, ...).
    probe = {"path": "/live", "periodSeconds": 0.3, "failureThreshold": 2, "timeoutSeconds": 5}
    apply_service(server, script, "fragile", template={"livenessProbe": probe})
    wait_for("a ready replica", lambda: status(server, "fragile").get("readyReplicas") == 1)
    first = status(server, "fragile")["endpoints"][0]["replica"]
    with entry(server) as client:
        before = client.get("/fragile/sicken").json()["pid"]
    wait_for(
        "a replacement",
        lambda: (
            [e["replica"] for e in status(server, "fragile").get("endpoints", [])]
            not in ([], [first])
        ),
        timeout=180,
    )
    with entry(server) as client:
        after = client.get("/fragile/").json()["pid"]
    assert after != before
    reasons = [e["reason"] for e in events(server, "fragile")]
    assert "ReplicaUnhealthy" in reasons and "BackOff" in reasons


def test_apply_refuses_a_missing_queue_a_forbidden_class_and_forged_load(
    world: tuple[ServerProcess, Path],
) -> None:
    server, script = world

    def submit(token: str, tenant: str, **spec: Any) -> httpx.Response:
        body = {"template": {"command": [TASK_PYTHON, str(script)]}, **spec}
        manifest = {
            "apiVersion": "aipaas/v1",
            "kind": "Service",
            "metadata": {"name": "refused", "tenant": tenant},
            "spec": body,
        }
        with server.http(token) as client:
            return client.post("/apply", content=json.dumps(manifest))

    missing = submit(ADMIN, "acme", queue="nope")
    assert missing.status_code == 422
    assert missing.json()["fields"][0]["path"] == "spec.queue"
    with server.http() as client:
        client.post("/apply", content=OTHER_TENANT).raise_for_status()
        gus = client.post("/tokens", json={"user": "gus", "tenant": "globex"}).json()["token"]
    forbidden = submit(gus, "globex", queue="research", priorityClassName="critical")
    assert forbidden.status_code == 422
    assert forbidden.json()["fields"][0]["path"] == "spec.priorityClassName"
    assert submit(gus, "acme", queue="research").status_code == 404  # not gus's tenant
    forged = {
        "apiVersion": "aipaas/v1",
        "kind": "ServiceLoad",
        "metadata": {"name": "hello", "tenant": "globex"},
    }
    with server.http(gus) as client:
        assert client.post("/apply", content=json.dumps(forged)).status_code == 403
    # A job cannot pass for a replica (the controller would list it as an endpoint).
    posing = {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "metadata": {"name": "posing", "tenant": "globex", "labels": {SERVICE: "hello"}},
        "spec": {"queue": "research", "tasks": [{"name": "t", "command": ["true"]}]},
    }
    with server.http(gus) as client:
        refused = client.post("/apply", content=json.dumps(posing))
    assert refused.status_code == 422
    assert refused.json()["fields"][0]["path"] == f"metadata.labels[{SERVICE}]"


def replica_jobs(server: ServerProcess, name: str) -> list[dict[str, Any]]:
    with server.http() as client:
        jobs: list[dict[str, Any]] = client.get("/jobs", params={"tenant": "acme"}).json()["items"]
    return [j for j in jobs if j["metadata"]["labels"].get("aipaas.dev/service") == name]


def test_a_public_service_needs_no_token_and_deleting_it_stops_its_replicas(
    world: tuple[ServerProcess, Path],
) -> None:
    server, script = world
    apply_service(server, script, "open", public=True)
    wait_for("a ready replica", lambda: status(server, "open").get("readyReplicas") == 1)
    answer = httpx.get(server.url + "/services/acme/open/", headers={"Authorization": "Bearer x"})
    assert answer.status_code == 200
    assert answer.json()["token"] == "Bearer x"  # a public service's own auth is its business
    with server.http() as client:
        client.delete("/services/open", params={"tenant": "acme"}).raise_for_status()
    wait_for("its replica gone", lambda: replica_jobs(server, "open") == [])
    assert httpx.get(server.url + "/services/acme/open/").status_code == 401


def test_a_crashing_replica_is_backed_off_and_its_service_says_crash_loop_back_off(
    world: tuple[ServerProcess, Path],
) -> None:
    server, script = world
    crash = {"command": [TASK_PYTHON, "-c", "print('cannot load the model'); exit(3)"]}
    apply_service(server, script, "crashy", template=crash)

    def backoffs() -> list[str]:
        return [e["message"] for e in events(server, "crashy") if e["reason"] == "BackOff"]

    wait_for("two failed starts", lambda: len(backoffs()) >= 2, timeout=120)
    waits = [message.split(" starts in ", 1)[1].split(" ")[0] for message in backoffs()[:2]]
    assert waits == ["10s", "20s"]
    assert all("exited with code 3" in message for message in backoffs())
    found = status(server, "crashy")
    assert found["reason"] == "CrashLoopBackOff", found
    assert "exited with code 3" in found["message"]
    assert found["crashLoop"]["lastExitCode"] == 3
    assert found["crashLoop"]["restarts"] >= 2
    assert "cannot load the model" in found["crashLoop"]["logTail"]
    assert len(replica_jobs(server, "crashy")) <= 1
    with server.http() as client:
        client.delete("/services/crashy", params={"tenant": "acme"}).raise_for_status()


def test_replicas_wait_for_their_queue_quota_like_jobs(world: tuple[ServerProcess, Path]) -> None:
    server, script = world
    tight = """apiVersion: aipaas/v1
kind: Queue
metadata: {name: tight, tenant: acme}
spec: {quota: {cpu: 1}}
"""
    with server.http() as client:
        client.post("/apply", content=tight).raise_for_status()
    apply_service(
        server,
        script,
        "capped",
        queue="tight",
        minReplicas=3,
        template={"resources": {"cpu": "500m"}},
    )
    wait_for("two ready replicas", lambda: status(server, "capped").get("readyReplicas") == 2)

    def reasons() -> list[str]:
        return sorted(
            (j.get("status") or {}).get("reason", "") for j in replica_jobs(server, "capped")
        )

    # The third replica's job waits, and the controller's admission says why.
    wait_for("the third replica held by the quota", lambda: "QuotaExceeded" in reasons())
    found = status(server, "capped")
    assert (found["desiredReplicas"], found["replicas"], found["readyReplicas"]) == (3, 3, 2)
    with server.http() as client:
        client.delete("/services/capped", params={"tenant": "acme"}).raise_for_status()
    wait_for("its replicas gone", lambda: replica_jobs(server, "capped") == [])


def test_an_answer_streams_through_as_the_replica_writes_it(
    world: tuple[ServerProcess, Path],
) -> None:
    server, script = world
    apply_service(server, script, "streamer")
    wait_for("a ready replica", lambda: status(server, "streamer").get("readyReplicas") == 1)
    arrivals: list[tuple[float, str]] = []
    with entry(server) as client, client.stream("GET", "/streamer/stream") as answer:
        started = time.monotonic()
        assert answer.status_code == 200
        for line in answer.iter_lines():
            arrivals.append((time.monotonic() - started, line))
    assert [line for _, line in arrivals] == [f"token {i}" for i in range(4)]
    assert arrivals[0][0] < arrivals[-1][0] - 2  # the first came well before the last (3 s)
    with server.http() as client:
        client.delete("/services/streamer", params={"tenant": "acme"}).raise_for_status()


def test_a_port_taken_by_another_process_never_gets_the_service_traffic(
    world: tuple[ServerProcess, Path],
) -> None:
    """Any local task may bind any free port: one that took a replica's port first would pass
    its health checks. The controller checks who listens before listing a replica."""
    server, script = world
    gate = """apiVersion: aipaas/v1
kind: Queue
metadata: {{name: gate, tenant: acme}}
spec: {{quota: {{cpu: {cpu}}}}}
"""
    with server.http() as client:
        client.post("/apply", content=gate.format(cpu="100m")).raise_for_status()
    apply_service(
        server,
        script,
        "victim",
        queue="gate",
        template={"env": {"HANG_IF_PORT_TAKEN": "1"}, "resources": {"cpu": "200m"}},
    )
    wait_for("a replica job", lambda: len(replica_jobs(server, "victim")) == 1)
    port = int(replica_jobs(server, "victim")[0]["spec"]["tasks"][0]["env"]["PORT"])
    seen: list[str] = []

    class Squatter(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    squatter = ThreadingHTTPServer(("127.0.0.1", port), Squatter)
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    try:
        with server.http() as client:  # the replica may start now, on a port already taken
            client.post("/apply", content=gate.format(cpu="1")).raise_for_status()
        wait_for(
            "the port noticed",
            lambda: "PortTaken" in [e["reason"] for e in events(server, "victim")],
            timeout=120,
        )
        wait_for("a ready replica", lambda: status(server, "victim").get("readyReplicas") == 1)
        assert status(server, "victim")["endpoints"][0]["port"] != port
        with entry(server) as client:
            assert client.get("/victim/").status_code == 200
        assert seen == []
    finally:
        squatter.shutdown()
        squatter.server_close()
    with server.http() as client:
        client.delete("/services/victim", params={"tenant": "acme"}).raise_for_status()


def test_the_example_service_answers_from_zero(world: tuple[ServerProcess, Path]) -> None:
    server, _script = world
    example = Path(__file__).parents[2] / "examples" / "service.yaml"
    with server.http() as client:
        client.post("/apply", content=example.read_text()).raise_for_status()
    wait_for("scaled to zero", lambda: status(server, "files").get("phase") == "Idle")
    with entry(server) as client:
        answer = client.get("/files/")
    assert answer.status_code == 200, answer.text
    assert "Directory listing" in answer.text
    with server.http() as client:
        client.delete("/services/files", params={"tenant": "acme"}).raise_for_status()


def test_liveness_waits_for_start_up_so_a_loading_replica_is_not_killed(
    world: tuple[ServerProcess, Path],
) -> None:
    server, script = world
    # /live fails while the replica loads: a liveness probe run before start-up had passed
    # would kill it after half a second.
    template = {
        "env": {"LOAD_SECONDS": "5"},
        "startupProbe": {
            "httpGet": {"path": "/ready"},
            "periodSeconds": 0.5,
            "failureThreshold": 120,
        },
        "readinessProbe": {"httpGet": {"path": "/ready"}, "periodSeconds": 0.5},
        "livenessProbe": {
            "httpGet": {"path": "/live"},
            "periodSeconds": 0.5,
            "failureThreshold": 1,
        },
    }
    apply_service(server, script, "loader", template=template)
    wait_for("the replica starting", lambda: status(server, "loader").get("reason") == "Starting")
    assert "startup probe" in status(server, "loader")["message"]
    wait_for("a ready replica", lambda: status(server, "loader").get("readyReplicas") == 1)
    first = status(server, "loader")["endpoints"][0]["replica"]
    time.sleep(2)  # liveness now runs, and passes
    assert [e["replica"] for e in status(server, "loader")["endpoints"]] == [first]
    reasons = [e["reason"] for e in events(server, "loader")]
    assert "ReplicaUnhealthy" not in reasons and "BackOff" not in reasons, reasons
    with server.http() as client:
        client.delete("/services/loader", params={"tenant": "acme"}).raise_for_status()


def test_an_exec_probe_runs_as_the_replicas_user_in_its_environment(
    world: tuple[ServerProcess, Path],
) -> None:
    server, script = world
    probe = {"exec": {"command": ["sh", "-c", 'id -u > "$HOME/probe-uid"']}, "periodSeconds": 0.5}
    apply_service(server, script, "execs", template={"readinessProbe": probe})
    wait_for("a ready replica", lambda: status(server, "execs").get("readyReplicas") == 1)
    with entry(server) as client:
        seen = client.get("/execs/whoami").json()
    assert seen["probe"] == seen["uid"]  # the probe ran as the replica's own user
    failing = {"exec": {"command": ["sh", "-c", "echo not yet; exit 4"]}, "periodSeconds": 0.5}
    apply_service(server, script, "execs", template={"readinessProbe": failing})
    wait_for(
        "the new replica not ready, said why",
        lambda: (
            "exited with code 4" in status(server, "execs").get("message", "")
            or any(
                "exited with code 4" in r.get("message", "")
                for r in status(server, "execs").get("replicaJobs", [])
            )
        ),
    )
    with server.http() as client:
        client.delete("/services/execs", params={"tenant": "acme"}).raise_for_status()


def test_a_request_waits_up_to_the_queue_bound_then_503_with_retry_after_and_is_counted(
    world: tuple[ServerProcess, Path],
) -> None:
    server, script = world
    # A port another test's server gave its replica makes this one exit 1 (CrashLoopBackOff);
    # hanging instead keeps what this test reads, a replica that never becomes ready.
    never = {
        "readinessProbe": {"httpGet": {"path": "/never"}, "periodSeconds": 0.5},
        "env": {"HANG_IF_PORT_TAKEN": "1"},
    }
    apply_service(server, script, "stuck", template=never, queueTimeoutSeconds=6)
    seen: list[float] = []

    def scrape() -> None:
        # Scraped while the request waits (it waits 6 s), until both series show it: a single
        # scrape at a fixed moment could come before the request was counted.
        time.sleep(1)
        for _ in range(8):
            text = httpx.get(
                server.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10
            ).text
            found = []
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    labels = sample.labels
                    if labels.get("service") == "stuck" and (
                        sample.name == "aipaas_service_queue_length"
                        or (
                            sample.name == "aipaas_service_requests"
                            and labels.get("state") == "waiting"
                        )
                    ):
                        found.append(sample.value)
            seen[:] = found
            if found and min(found) >= 1:
                return
            time.sleep(0.5)

    scraper = threading.Thread(target=scrape)
    scraper.start()
    began = time.monotonic()
    with entry(server) as client:
        answer = client.get("/stuck/")
    waited = time.monotonic() - began
    scraper.join()
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "5"
    assert "queueTimeoutSeconds" in answer.json()["error"]
    assert 6 <= waited < 30
    assert seen and min(seen) >= 1, seen  # the waiting request, as the queue and as waiting
    found = status(server, "stuck")
    assert found["reason"] == "NotReady" and "readiness probe" in found["message"], found
    with server.http() as client:
        client.delete("/services/stuck", params={"tenant": "acme"}).raise_for_status()


def test_a_failing_health_check_takes_a_replica_out_of_the_endpoints_but_never_restarts_it(
    world: tuple[ServerProcess, Path],
) -> None:
    server, script = world
    check = {"path": "/live", "periodSeconds": 0.3, "failureThreshold": 2}
    apply_service(server, script, "checked", template={"healthCheck": check})
    wait_for("a ready replica", lambda: status(server, "checked").get("readyReplicas") == 1)
    first = status(server, "checked")["endpoints"][0]["replica"]
    with entry(server) as client:
        client.get("/checked/sicken").raise_for_status()
    wait_for("out of the endpoints", lambda: status(server, "checked").get("endpoints") == [])
    time.sleep(3)  # a liveness probe failing this long would have restarted it
    found = status(server, "checked")
    assert [r["job"] for r in found["replicaJobs"]] == [first]
    assert found["reason"] == "NotReady" and "HTTP 500" in found["message"], found
    reasons = [e["reason"] for e in events(server, "checked")]
    assert "ReplicaUnhealthy" not in reasons and "BackOff" not in reasons, reasons
    with server.http() as client:
        client.delete("/services/checked", params={"tenant": "acme"}).raise_for_status()
