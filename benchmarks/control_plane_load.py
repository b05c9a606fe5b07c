"""Control-plane load: N job submissions from C concurrent clients against a real `aipaas
server` (sim backend, controller on), with SQLite and with PostgreSQL. Prints submissions/s and
the scheduling latency (submission to gang placed) that the server's /metrics histogram saw.

    .venv/bin/python benchmarks/control_plane_load.py [--jobs 2000] [--clients 20]
        [--db sqlite,postgresql]

Targets from issue 3: 500 submissions/s (SQLite) and 1,000/s (PostgreSQL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
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
    parser.add_argument("--workers", type=int, default=1, help="API processes of the server")
    args = parser.parse_args()
    rows = []
    for db in args.db.split(","):
        if db == "postgresql" and unavailable_reason():
            print(f"postgresql skipped: {unavailable_reason()}")
            continue
        rows.append((db, *run(db, args.jobs, args.clients, args.workers)))
    print(
        f"\n{'database':<12}{'workers':>8}{'jobs':>7}{'clients':>9}{'submit/s':>10}"
        f"{'errors':>8}{'stored':>8}{'sched mean s':>14}{'sched p95 s':>13}{'all placed s':>14}"
    )
    for db, rate, errors, stored, mean, p95, placed in rows:
        print(
            f"{db:<12}{args.workers:>8}{args.jobs:>7}{args.clients:>9}{rate:>10.0f}{errors:>8}"
            f"{stored:>8}{mean:>14.2f}{p95:>13}{placed:>14.1f}"
        )


def run(
    db: str, jobs: int, clients: int, workers: int
) -> tuple[float, int, int, float, str, float]:
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
        "--workers",
        str(workers),
    ]
    if postgres is not None:
        command += ["--db", postgres.start()]
    command += os.environ.get("BENCH_EXTRA", "").split()
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
        cpu_before = _cpu_by_group(server.pid)
        started = time.monotonic()
        asyncio.run(_submit_all(port, jobs, clients, errors))
        elapsed = time.monotonic() - started
        rate = jobs / elapsed
        cpu_after = _cpu_by_group(server.pid)
        spent = {group: cpu_after[group] - cpu_before.get(group, 0.0) for group in cpu_after}
        print(
            f"{db}: {elapsed:.2f} s of submissions; CPU ms per job: "
            + ", ".join(f"{group} {1000 * seconds / jobs:.2f}" for group, seconds in spent.items())
        )
        placed = _wait_placed(url, jobs) - started if "--no-controller" not in command else 0.0
        mean, p95 = _latency(httpx.get(url + "/metrics").text) if placed else (0.0, "-")
        listed = httpx.get(url + "/api/v1/jobs", params={"tenant": "acme"}, headers=headers)
        stored = len(listed.raise_for_status().json()["items"])
        return rate, len(errors), stored, mean, p95, placed
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        if postgres is not None:
            postgres.stop()


async def _submit_all(port: int, jobs: int, clients: int, errors: list[str]) -> None:
    shares = [jobs // clients + (1 if c < jobs % clients else 0) for c in range(clients)]
    await asyncio.gather(*(_submit(port, c, n, errors) for c, n in enumerate(shares)))


async def _submit(port: int, client_index: int, count: int, errors: list[str]) -> None:
    """One client: a keep-alive HTTP/1.1 connection submitting one job after another.

    Written on asyncio streams rather than an HTTP library so that the client, which shares
    this machine's two cores with the server, costs about 0.1 ms a request.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for index in range(count):
            body = json.dumps(_job(f"b-{client_index}-{index}")).encode()
            writer.write(
                b"POST /api/v1/apply HTTP/1.1\r\nHost: bench\r\n"
                + f"Authorization: Bearer {TOKEN}\r\n".encode()
                + b"Content-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            answer = await reader.readexactly(length)
            if status != 200:
                errors.append(answer.decode(errors="replace"))
    finally:
        writer.close()


def _job(name: str) -> dict[str, object]:
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "tenant": "acme",
            "annotations": {"sim.aipaas.dev/duration": "1"},
        },
        "spec": {
            "queue": "research",
            "tasks": [
                {"name": "w", "command": ["train"], "resources": {"cpu": "100m", "memory": "64Mi"}}
            ],
        },
    }


def _cpu_by_group(server_session: int) -> dict[str, float]:
    """CPU seconds (user + system) used so far by the server's processes, PostgreSQL's, this
    client and everything else on the machine, read from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    groups = {"server": 0.0, "postgresql": 0.0, "client": 0.0, "other": 0.0}
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_path.read_text()
        except OSError:
            continue
        command = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        seconds = (int(fields[11]) + int(fields[12])) / tick
        pid = int(stat_path.parent.name)
        if int(fields[3]) == server_session:
            groups["server"] += seconds
        elif command.startswith("postgres"):
            groups["postgresql"] += seconds
        elif pid == os.getpid():
            groups["client"] += seconds
        else:
            groups["other"] += seconds
    return groups


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
