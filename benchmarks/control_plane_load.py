"""Control-plane load: N job submissions from C concurrent clients against a real `aipaas
server` (sim backend, controller on), with SQLite and with PostgreSQL. Prints submissions/s and
the scheduling latency (submission to gang placed) that the server's /metrics histogram saw.

    .venv/bin/python benchmarks/control_plane_load.py [--jobs 2000] [--clients 20]
        [--db sqlite,postgresql]

Targets from issue 3: 500 submissions/s (SQLite) and 1,000/s (PostgreSQL).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from aipaas.store.pgtest import ThrowawayPostgres, unavailable_reason

AIPAAS = str(Path(sys.executable).parent / "aipaas")
TOKEN = "benchmark-admin-token"
SETUP = (
    "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\n---\n"
    "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: research, tenant: acme}\n"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--db", default="sqlite,postgresql")
    args = parser.parse_args()
    rows = []
    for db in args.db.split(","):
        if db == "postgresql" and unavailable_reason():
            print(f"postgresql skipped: {unavailable_reason()}")
            continue
        rows.append((db, *run(db, args.jobs, args.clients)))
    print(
        f"\n{'database':<12}{'jobs':>7}{'clients':>9}{'submit/s':>10}{'errors':>8}"
        f"{'sched mean s':>14}{'sched p95 s':>13}{'all placed s':>14}"
    )
    for db, rate, errors, mean, p95, placed in rows:
        print(
            f"{db:<12}{args.jobs:>7}{args.clients:>9}{rate:>10.0f}{errors:>8}"
            f"{mean:>14.2f}{p95:>13}{placed:>14.1f}"
        )


def run(db: str, jobs: int, clients: int) -> tuple[float, int, float, str, float]:
    data = Path(tempfile.mkdtemp(prefix="aipaas-bench-"))
    postgres = ThrowawayPostgres() if db == "postgresql" else None
    port = _free_port()
    command = [
        AIPAAS,
        "server",
        "--data-dir",
        str(data),
        "--port",
        str(port),
        "--backend",
        "sim",
        "--log-level",
        "warning",
    ]
    if postgres is not None:
        command += ["--db", postgres.start()]
    server = subprocess.Popen(
        command,
        env={**os.environ, "AIPAAS_BOOTSTRAP_TOKEN": TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        httpx.post(url + "/api/v1/apply", content=SETUP, headers=headers).raise_for_status()
        errors: list[str] = []
        started = time.monotonic()
        threads = [
            threading.Thread(target=_submit, args=(url, c, jobs // clients, errors))
            for c in range(clients)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        rate = jobs / (time.monotonic() - started)
        placed = _wait_placed(url, jobs) - started
        mean, p95 = _latency(httpx.get(url + "/metrics").text)
        return rate, len(errors), mean, p95, placed
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        if postgres is not None:
            postgres.stop()


def _submit(url: str, client_index: int, count: int, errors: list[str]) -> None:
    with httpx.Client(
        base_url=url + "/api/v1", timeout=120, headers={"Authorization": f"Bearer {TOKEN}"}
    ) as client:
        for index in range(count):
            job = {
                "apiVersion": "aipaas/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"b-{client_index}-{index}",
                    "tenant": "acme",
                    "annotations": {"sim.aipaas.dev/duration": "1"},
                },
                "spec": {
                    "queue": "research",
                    "tasks": [
                        {
                            "name": "w",
                            "command": ["train"],
                            "resources": {"cpu": "100m", "memory": "64Mi"},
                        }
                    ],
                },
            }
            answer = client.post("/apply", content=json.dumps(job))
            if answer.status_code != 200:
                errors.append(answer.text)


def _wait_placed(url: str, jobs: int, timeout: float = 600) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = httpx.get(url + "/metrics").text
        match = re.search(r"^aipaas_scheduling_latency_seconds_count ([0-9.e+]+)$", text, re.M)
        if match and float(match.group(1)) >= jobs:
            return time.monotonic()
        time.sleep(0.5)
    raise SystemExit("not every job was placed in time")


def _latency(metrics: str) -> tuple[float, str]:
    total = float(re.search(r"^aipaas_scheduling_latency_seconds_sum (\S+)$", metrics, re.M)[1])
    count = float(re.search(r"^aipaas_scheduling_latency_seconds_count (\S+)$", metrics, re.M)[1])
    buckets = re.findall(
        r'^aipaas_scheduling_latency_seconds_bucket\{le="([^"]+)"\} (\S+)$', metrics, re.M
    )
    p95 = next((le for le, n in buckets if float(n) >= 0.95 * count), "+Inf")
    return total / max(count, 1), f"<= {p95}"


def _wait_ready(url: str) -> None:
    for _ in range(300):
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit("server did not start")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


if __name__ == "__main__":
    main()
