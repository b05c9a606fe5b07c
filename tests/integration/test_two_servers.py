"""Two servers on one database: both serve the API, one runs the controller (the lease); when it
is killed, the other takes over."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from tests.support.server_process import ADMIN, AIPAAS, SETUP, TASK_PYTHON, ServerProcess

JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, tenant: acme}}
spec:
  queue: research
  tasks: [{{name: w, replicas: 2, command: [{python}, -c, "print('hi')"]}}]
"""


def test_one_controller_and_a_takeover(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = ServerProcess(data).start()
    second = ServerProcess(data).start()
    try:
        second.cli(
            "apply", "-f", "-", input=SETUP + "---\n" + JOB.format(name="a", python=TASK_PYTHON)
        )
        second.wait_phase("a", "Succeeded")
        events = [e["reason"] for e in second.cli_json("events", "job", "a", "-t", "acme")]
        assert events.count("Scheduled") == 1 and events.count("TaskSucceeded") == 2
        first.kill9()
        second.cli("apply", "-f", "-", input=JOB.format(name="b", python=TASK_PYTHON))
        second.wait_phase("b", "Succeeded")
    finally:
        first.stop()
        second.stop()


def test_several_api_workers(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", extra=["--workers", "2"]).start()
    try:
        server.cli(
            "apply", "-f", "-", input=SETUP + "---\n" + JOB.format(name="w", python=TASK_PYTHON)
        )
        server.wait_phase("w", "Succeeded")
        events = [e["reason"] for e in server.cli_json("events", "job", "w", "-t", "acme")]
        assert events.count("Scheduled") == 1
        # Whichever worker a scrape reaches, it reports what the controller's worker saw.
        admin = {"Authorization": f"Bearer {ADMIN}"}
        scrapes = [httpx.get(server.url + "/metrics", headers=admin).text for _ in range(12)]
        for text in scrapes:
            assert 'aipaas_jobs{phase="Succeeded"} 1.0' in text, text
            assert "aipaas_scheduling_latency_seconds_count 1.0" in text, text
            assert 'aipaas_queue_pending_jobs{queue="research",tenant="acme"} 0.0' in text, text
    finally:
        server.stop()


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=30).status_code == 200
    except httpx.TransportError:  # no worker listening yet
        return False


def _children(pid: int) -> set[int]:
    """The pool's processes (multiprocessing's own resource tracker aside)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                command = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"spawn_main" in command:
                found.add(int(child))
    return found


def test_the_worker_pool_replaces_killed_processes_and_stops_them_all(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", extra=["--workers", "2"]).start()
    assert server.process is not None
    try:
        server.cli("apply", "-f", "-", input=SETUP)
        first = _children(server.process.pid)
        assert len(first) == 2  # two API workers (the controller runs in one of them)
        for pid in first:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            now = _children(server.process.pid)
            if len(now) == 2 and not now & first:
                break
            time.sleep(0.2)
        replaced = _children(server.process.pid)
        assert len(replaced) == 2 and not replaced & first
        deadline = time.monotonic() + 90
        while not _ready(server.url):
            assert time.monotonic() < deadline, "the replaced processes never became ready"
            time.sleep(0.2)
        server.cli("apply", "-f", "-", input=JOB.format(name="after", python=TASK_PYTHON))
        server.wait_phase("after", "Succeeded")
    finally:
        server.stop()
    assert not [pid for pid in replaced if Path(f"/proc/{pid}").exists()]


def test_workers_on_a_busy_port_fail_with_the_reason(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [AIPAAS, "server", "--data-dir", str(tmp_path), "--port", str(port)]
        result = subprocess.run(
            [*command, "--workers", "2", "--backend", "sim"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 7  # the CLI's exit code for a port taken (cli/failure.py)
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in result.stderr
    assert "Traceback" not in result.stderr
