"""Control-plane load: N job submissions from C concurrent clients against a real `aipaas
server` (sim backend, controller on), with SQLite and with PostgreSQL. Prints submissions/s and
the scheduling latency (submission to gang placed) that the server's /metrics histogram saw.

    .venv/bin/python benchmarks/control_plane_load.py [--jobs 2000] [--clients 20]
        [--db sqlite,postgresql] [--workers 1] [--repeat 1] [--warmup 200] [--no-controller]

Each run starts a fresh server (and a throwaway PostgreSQL), submits ``--warmup`` jobs untimed,
then times the ``--jobs`` submissions; it also prints the CPU each process group spent per timed
submission (server, PostgreSQL, this client), read from /proc, and a yardstick (a fixed piece of
pure-Python work timed just before), since this machine's speed varies.

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
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from _measure import usable_databases
from aipaas.store.pgtest import ThrowawayPostgres

AIPAAS = str(Path(sys.executable).parent / "aipaas")
TOKEN = "benchmark-admin-token"
ADMIN_HEADERS = {"Authorization": f"Bearer {TOKEN}"}  # /metrics needs a token too
WORKER_SETTLE_SECONDS = 3.0
SETUP = (
    "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\n---\n"
    "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: research, tenant: acme}\n"
)


@dataclass
class Result:
    database: str
    run: int
    rate: float
    errors: int
    stored: int
    cpu_ms: dict[str, float]  # CPU ms per timed submission, by process group
    latency_mean: float
    latency_p95: str
    placed_seconds: float
    host_ms: float  # the fixed pure-Python yardstick, timed just before the run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--db", default="sqlite,postgresql")
    parser.add_argument("--workers", type=int, default=1, help="API processes of the server")
    parser.add_argument("--repeat", type=int, default=1, help="runs per database, interleaved")
    parser.add_argument(
        "--warmup", type=int, default=200, help="untimed submissions before the timed ones"
    )
    parser.add_argument(
        "--no-controller", action="store_true", help="the API alone (nothing is placed)"
    )
    args = parser.parse_args()
    databases = usable_databases(args.db)
    results = [run(db, index + 1, args) for index in range(args.repeat) for db in databases]
    print(
        f"\n{args.jobs} submissions from {args.clients} clients after {args.warmup} untimed, "
        f"{args.workers} API process(es), controller {'off' if args.no_controller else 'on'}"
    )
    print(
        f"{'database':<12}{'run':>4}{'submit/s':>10}{'errors':>8}{'stored':>8}"
        f"{'CPU ms/job: server':>20}{'db':>6}{'client':>8}"
        f"{'sched mean s':>14}{'sched p95 s':>13}{'all placed s':>14}{'yardstick ms':>14}"
    )
    for r in results:
        print(
            f"{r.database:<12}{r.run:>4}{r.rate:>10.0f}{r.errors:>8}{r.stored:>8}"
            f"{r.cpu_ms['server']:>20.2f}{r.cpu_ms['postgresql']:>6.2f}{r.cpu_ms['client']:>8.2f}"
            f"{r.latency_mean:>14.2f}{r.latency_p95:>13}{r.placed_seconds:>14.1f}"
            f"{r.host_ms:>14.0f}"
        )
    for db in databases:
        rates = [r.rate for r in results if r.database == db]
        print(f"{db}: median {statistics.median(rates):.0f} submissions/s over {len(rates)} run(s)")


def run(db: str, index: int, args: argparse.Namespace) -> Result:
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
        str(args.workers),
    ]
    if postgres is not None:
        command += ["--db", postgres.start()]
    if args.no_controller:
        command.append("--no-controller")
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
        if args.workers > 1:  # /readyz answers once one worker is up; the others bind later
            time.sleep(WORKER_SETTLE_SECONDS)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        httpx.post(url + "/api/v1/apply", content=SETUP, headers=headers).raise_for_status()
        errors: list[str] = []
        asyncio.run(_submit_all(port, "warm", args.warmup, args.clients, errors))
        host_ms = _yardstick()
        cpu_before = _cpu_by_process(server.pid)
        started = time.monotonic()
        asyncio.run(_submit_all(port, "b", args.jobs, args.clients, errors))
        elapsed = time.monotonic() - started
        spent = _cpu_between(cpu_before, _cpu_by_process(server.pid))
        cpu_ms = {g: 1000 * seconds / args.jobs for g, seconds in spent.items()}
        total = args.jobs + args.warmup
        if args.no_controller:
            placed, mean, p95 = 0.0, 0.0, "-"
        else:
            placed = _wait_placed(url, total) - started
            mean, p95 = _latency(httpx.get(url + "/metrics", headers=headers).text)
        listed = httpx.get(
            url + "/api/v1/jobs", params={"tenant": "acme", "limit": 5000}, headers=headers
        )
        stored = len(listed.raise_for_status().json()["items"]) - args.warmup
        return Result(
            db, index, args.jobs / elapsed, len(errors), stored, cpu_ms, mean, p95, placed, host_ms
        )
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        if postgres is not None:
            postgres.stop()


async def _submit_all(port: int, prefix: str, jobs: int, clients: int, errors: list[str]) -> None:
    shares = [jobs // clients + (1 if c < jobs % clients else 0) for c in range(clients)]
    await asyncio.gather(*(_submit(port, prefix, c, n, errors) for c, n in enumerate(shares)))


async def _submit(port: int, prefix: str, client_index: int, count: int, errors: list[str]) -> None:
    """One client: a keep-alive HTTP/1.1 connection submitting one job after another.

    Written on asyncio streams rather than an HTTP library so that the client, which shares
    this machine's two cores with the server, costs about 0.1 ms a request.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for index in range(count):
            body = json.dumps(_job(f"{prefix}-{client_index}-{index}")).encode()
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


def _yardstick() -> float:
    """Milliseconds this machine takes for a fixed piece of pure-Python work (dicts, strings,
    JSON), the kind the server does. The host is shared and its speed varies: read a run's
    submissions/s beside this (higher is a slower host at that moment)."""
    started = time.perf_counter()
    for round_ in range(3000):
        document = {
            "name": f"job-{round_}",
            "tasks": [{"cpu": i, "name": str(i)} for i in range(8)],
        }
        json.loads(json.dumps(document))
    return 1000 * (time.perf_counter() - started)


def _cpu_by_process(server_session: int) -> dict[int, tuple[str, float]]:
    """Per process: its group (the server's processes, PostgreSQL's, this client, everything
    else on the machine) and the CPU seconds (user + system) it used so far, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    processes: dict[int, tuple[str, float]] = {}
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
            group = "server"
        elif command.startswith("postgres"):
            group = "postgresql"
        elif pid == os.getpid():
            group = "client"
        else:
            group = "other"
        processes[pid] = (group, seconds)
    return processes


def _cpu_between(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds each group used between two readings; a process that ended in between is
    left out (what it used is gone from /proc), one that started counts from zero."""
    groups = {"server": 0.0, "postgresql": 0.0, "client": 0.0, "other": 0.0}
    for pid, (group, seconds) in after.items():
        earlier = before.get(pid)
        groups[group] += seconds - (earlier[1] if earlier is not None else 0.0)
    return groups


def _wait_placed(url: str, jobs: int, timeout: float = 600) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = httpx.get(url + "/metrics", headers=ADMIN_HEADERS).text
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
