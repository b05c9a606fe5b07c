"""Services on the local backend, measured with real processes: the entry point's added
latency (direct to a replica vs through /services/...), the time a load takes to scale a
service from 1 to N replicas and back, and a cold start from zero.

    .venv/bin/python benchmarks/services_entry.py [--requests 300] [--workers 12]
    .venv/bin/python benchmarks/services_entry.py --model [--steps 1,2,4,2,1,0] [--step-seconds 30]

Prints a markdown table. The replica is a standard-library ThreadingHTTPServer; the load is
``--workers`` threads each sending GET /slow (0.2 s of work) in a loop, against a target of 2
requests in flight per replica. Numbers depend on the machine's load: say what ran beside.

``--model``: the real embedding model (examples/embedding_server.py, its packages in the tests'
virtual environment, tests/support/model_venv.py, made when absent) under a stepped load
(``--steps`` client threads, each step ``--step-seconds``), autoscaled from zero (target 1 in
flight per replica) beside the same load on a static service at the peak's count: cold start,
p50/p95/p99 latency, the share of requests within ``--slo-ms``, replica-seconds, and the
replicas at the end of each step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from _engines_run import TOKEN, Server

REPLICA = r"""
import os, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/slow"):
            time.sleep(0.2)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""


def task_python() -> str:
    """A Python every task user can run (a root server runs tasks as other users)."""
    for candidate in (sys.executable, shutil.which("python3", path="/usr/bin:/usr/local/bin")):
        if candidate and all(
            os.stat(p).st_mode & 0o001 for p in [*Path(candidate).resolve().parents]
        ):
            return candidate
    raise SystemExit("no Python reachable by task users")


def service(name: str, script: Path, **spec: Any) -> str:
    body = {
        "queue": "research",
        "drainSeconds": 1,
        "template": {"command": [task_python(), str(script)], "resources": {"cpu": "100m"}},
        **spec,
    }
    return json.dumps(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Service",
            "metadata": {"name": name, "tenant": "acme"},
            "spec": body,
        }
    )


def status(server: Server, name: str) -> dict[str, Any]:
    found = server.client.get(f"/services/{name}", params={"tenant": "acme"}).json()
    return dict(found.get("status") or {})


def wait(check: Callable[[], bool], timeout: float = 120) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.05)
    raise RuntimeError("timed out")


def latencies(client: httpx.Client, url: str, count: int) -> list[float]:
    seen = []
    for _ in range(count):
        started = time.perf_counter()
        client.get(url).raise_for_status()
        seen.append((time.perf_counter() - started) * 1000)
    return seen


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def model_run(
    server: Server, name: str, spec: dict[str, Any], steps: list[int], step_seconds: float
) -> dict[str, Any]:
    """One service of the model under the stepped load: latencies, codes, replicas sampled."""
    body: dict[str, Any] = {
        "apiVersion": "aipaas/v1",
        "kind": "Service",
        "metadata": {"name": name, "tenant": "acme"},
        "spec": spec,
    }
    server.client.post("/apply", content=json.dumps(body)).raise_for_status()
    url = f"{server.url}/services/acme/{name}/v1/embeddings"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    if spec.get("minReplicas", 1) == 0:
        wait(lambda: status(server, name).get("phase") == "Idle", 120)
    else:
        wait(lambda: status(server, name).get("readyReplicas", 0) >= spec["minReplicas"], 600)
    started = time.monotonic()
    httpx.post(url, json={"input": ["wake up"]}, headers=headers, timeout=330).raise_for_status()
    cold = time.monotonic() - started
    latencies: list[float] = []
    codes: list[int] = []
    samples: list[int] = []
    at_step_end: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            samples.append(int(status(server, name).get("replicas", 0)))
            time.sleep(1.0)

    def post(until: float, number: int) -> None:
        with httpx.Client(headers=headers, timeout=330) as client:
            while time.monotonic() < until:
                began = time.monotonic()
                try:
                    answer = client.post(
                        url, json={"input": [f"sentence {number} {i}" for i in range(8)]}
                    )
                    codes.append(answer.status_code)
                except httpx.HTTPError:
                    codes.append(0)
                latencies.append(time.monotonic() - began)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for count in steps:
            until = time.monotonic() + step_seconds
            threads = [threading.Thread(target=post, args=(until, n)) for n in range(count)]
            for thread in threads:
                thread.start()
            if not threads:
                time.sleep(step_seconds)
            for thread in threads:
                thread.join()
            at_step_end.append(int(status(server, name).get("replicas", 0)))
    finally:
        done.set()
        watcher.join()
    return {
        "cold": cold,
        "latencies": latencies,
        "codes": codes,
        "replica_seconds": float(sum(samples)),
        "at_step_end": at_step_end,
    }


def model_main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1]))  # the repository root: tests.support
    from tests.support import model_venv

    python = model_venv.ensure()
    steps = [int(part) for part in args.steps.split(",")]
    shared = Path(tempfile.mkdtemp(prefix="aipaas-model-bench-"))
    shared.chmod(0o1777)
    script = shared / "embedding_server.py"
    shutil.copy(Path(__file__).parents[1] / "examples" / "embedding_server.py", script)
    script.chmod(0o644)
    (shared / "data").mkdir()
    server = Server(shared / "data", "local", []).start()
    peak = max(steps)
    template = {
        "command": [str(python), str(script)],
        "env": {"HF_HUB_OFFLINE": "1", "THREADS": "1"},
        "resources": {"cpu": "500m", "memory": "1Gi"},
        "startupProbe": {
            "httpGet": {"path": "/ready"},
            "periodSeconds": 1,
            "failureThreshold": 300,
        },
        "readinessProbe": {"httpGet": {"path": "/ready"}, "periodSeconds": 1},
        "livenessProbe": {"httpGet": {"path": "/healthz"}, "periodSeconds": 5},
    }
    common = {"queue": "research", "drainSeconds": 2, "template": template}
    autoscaled = {
        **common,
        "minReplicas": 0,
        "maxReplicas": peak,
        "autoscaling": {
            "target": 1,
            "stableWindowSeconds": 20,
            "panicWindowSeconds": 4,
            "scaleDown": {"stabilizationWindowSeconds": 20},
        },
    }
    static = {**common, "minReplicas": peak, "maxReplicas": peak}
    runs: dict[str, dict[str, Any]] = {}
    try:
        server.setup()
        runs["autoscaled"] = model_run(server, "embed-auto", autoscaled, steps, args.step_seconds)
        server.client.delete("/services/embed-auto", params={"tenant": "acme"})
        runs["static at peak"] = model_run(server, "embed-static", static, steps, args.step_seconds)
    finally:
        server.stop()
        shutil.rmtree(shared, ignore_errors=True)
    print(
        f"Stepped load {args.steps} client threads, {args.step_seconds:g} s a step, each request "
        f"8 sentences; SLO {args.slo_ms} ms.\n"
    )
    print(
        "| run | cold start (s) | requests | non-2xx | p50 / p95 / p99 (ms) | within SLO "
        "| replica-seconds | replicas at each step's end |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for label, run in runs.items():
        values = [v * 1000 for v in run["latencies"]]
        within = sum(v <= args.slo_ms for v in values) / max(len(values), 1)
        bad = sum(not 200 <= c < 300 for c in run["codes"])
        cold = f"{run['cold']:.1f}" if label == "autoscaled" else "-"
        print(
            f"| {label} | {cold} | {len(values)} | {bad} | {percentile(values, 0.5):.0f} / "
            f"{percentile(values, 0.95):.0f} / {percentile(values, 0.99):.0f} | "
            f"{within:.1%} | {run['replica_seconds']:.0f} | "
            f"{' '.join(str(n) for n in run['at_step_end'])} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--model", action="store_true", help="the real embedding model")
    parser.add_argument("--steps", default="1,2,4,2,1,0")
    parser.add_argument("--step-seconds", type=float, default=30.0)
    parser.add_argument("--slo-ms", type=float, default=1000.0)
    args = parser.parse_args()
    if args.model:
        model_main(args)
        return
    shared = Path(tempfile.mkdtemp(prefix="aipaas-services-bench-"))
    shared.chmod(0o1777)
    script = shared / "replica.py"
    script.write_text(REPLICA)
    script.chmod(0o644)
    server = Server(shared / "data", "local", [])
    (shared / "data").mkdir()
    server.start()
    rows: list[tuple[str, str]] = []
    try:
        server.setup()
        scaling = {
            "target": 2,
            "stableWindowSeconds": 6,
            "panicWindowSeconds": 2,
            "scaleDown": {"stabilizationWindowSeconds": 3, "periodSeconds": 1},
        }
        post = server.client.post
        post("/apply", content=service("bench", script, maxReplicas=6, autoscaling=scaling))
        wait(lambda: status(server, "bench").get("readyReplicas") == 1)
        endpoint = status(server, "bench")["endpoints"][0]
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(headers=headers, timeout=30) as client:
            direct = latencies(
                client, f"http://{endpoint['address']}:{endpoint['port']}/", args.requests
            )
            proxied = latencies(client, f"{server.url}/services/acme/bench/", args.requests)
        for label, values in (("direct", direct), ("through the entry point", proxied)):
            rows.append(
                (
                    f"latency {label}, p50 / p99 (ms)",
                    f"{statistics.median(values):.2f} / {percentile(values, 0.99):.2f}",
                )
            )
        stop = threading.Event()
        codes: list[int] = []

        def load() -> None:
            with httpx.Client(headers=headers, timeout=60) as client:
                while not stop.is_set():
                    codes.append(client.get(f"{server.url}/services/acme/bench/slow").status_code)

        threads = [threading.Thread(target=load, daemon=True) for _ in range(args.workers)]
        for thread in threads:
            thread.start()
        wanted = min(6, -(-args.workers // 2))
        up = wait(lambda: status(server, "bench").get("readyReplicas", 0) >= wanted)
        stop.set()
        for thread in threads:
            thread.join(30)
        down = wait(lambda: status(server, "bench").get("replicas") == 1)
        rows.append((f"{args.workers} clients: 1 -> {wanted} ready replicas (s)", f"{up:.1f}"))
        rows.append((f"load gone: {wanted} -> 1 replica (s)", f"{down:.1f}"))
        failed = sum(code != 200 for code in codes)
        rows.append(("requests under load / non-2xx", f"{len(codes)} / {failed}"))
        zero = {**scaling, "scaleDown": {"stabilizationWindowSeconds": 1}}
        post("/apply", content=service("cold", script, minReplicas=0, autoscaling=zero))
        wait(lambda: status(server, "cold").get("phase") == "Idle")
        started = time.monotonic()
        httpx.get(f"{server.url}/services/acme/cold/", headers=headers, timeout=60)
        rows.append(
            ("cold start: first request from zero (s)", f"{time.monotonic() - started:.2f}")
        )
    finally:
        server.stop()
        shutil.rmtree(shared, ignore_errors=True)
    print("| measure | value |\n| --- | --- |")
    for label, value in rows:
        print(f"| {label} | {value} |")


if __name__ == "__main__":
    main()
