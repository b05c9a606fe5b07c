"""A full disk, for real: a small tmpfs holds the server's data directory (database and task
logs, the default layout). A task that prints without end is held to its log's cap, so the
store and every other tenant keep writing; a disk filled from outside makes /readyz say not
ready, and ready again once there is room. Needs root (the mounts)."""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server_process import SETUP, TASK_PYTHON, ServerProcess

MIB = 1 << 20
DISK_BYTES = 24 * MIB
LIMITS = {
    "AIPAAS_TASK_LOG_HEAD_BYTES": str(1 * MIB),
    "AIPAAS_TASK_LOG_TAIL_BYTES": str(2 * MIB),
    "AIPAAS_TASK_LOG_MIN_FREE_BYTES": str(6 * MIB),
    "AIPAAS_STORE_MIN_FREE_BYTES": str(2 * MIB),
}
BETA = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: beta}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: beta}
"""
FLOOD = """---
apiVersion: aipaas/v1
kind: Job
metadata: {{name: flood, tenant: acme}}
spec:
  queue: research
  tasks:
    - name: w
      command:
        - {python}
        - -c
        - |
          import sys
          line = b"x" * 4095 + b"\\n"
          count = 0
          while True:
              count += 1
              sys.stdout.buffer.write(b"%012d " % count + line)
      resources: {{cpu: 100m, memory: 64Mi}}
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small disk needs root")


@contextlib.contextmanager
def small_disk(path: Path, size: int) -> Iterator[Path]:
    path.mkdir(parents=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def free_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def used_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def process_figures(pid: int) -> dict[str, int]:
    """The server's resident memory (KiB), open descriptors and threads."""
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {
        "rss_kib": int(status["VmRSS"].split()[0]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "threads": int(status["Threads"]),
    }


def queue(name: str) -> str:
    return f"apiVersion: aipaas/v1\nkind: Queue\nmetadata: {{name: {name}, tenant: beta}}\n"


def beta_writes(server: ServerProcess, count: int) -> tuple[list[int], list[float]]:
    """``count`` writes of tenant beta, one at a time: their status codes and latencies (s)."""
    codes, seconds = [], []
    with server.http() as client:
        for index in range(count):
            began = time.perf_counter()
            answer = client.post("/apply", content=queue(f"q-{time.time_ns()}-{index}"))
            seconds.append(time.perf_counter() - began)
            codes.append(answer.status_code)
    return codes, seconds


def ready(server: ServerProcess) -> int:
    return httpx.get(server.url + "/readyz", timeout=10).status_code


def test_a_task_printing_without_end_leaves_the_store_and_other_tenants_writing(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk", DISK_BYTES) as disk:
        server = ServerProcess(disk / "data", env=LIMITS).start()
        try:
            server.cli("apply", "-f", "-", input=SETUP + "---\n" + BETA)
            _, quiet = beta_writes(server, 30)
            before = process_figures(server.process.pid)  # type: ignore[union-attr]
            server.cli("apply", "-f", "-", input=FLOOD.format(python=TASK_PYTHON))
            server.wait_phase("flood", "Running")
            logs = disk / "data" / "logs"
            time.sleep(5)  # at hundreds of MB a second: the disk, uncapped, is full by now
            codes, loaded = beta_writes(server, 30)
            after = process_figures(server.process.pid)  # type: ignore[union-attr]
            assert set(codes) <= {200, 201}, codes
            assert ready(server) == 200
            used = used_bytes(logs)
            assert used <= 1 * MIB + 3 * MIB, f"the flood's log holds {used} bytes"
            assert server.phase("flood") == "Running"
            last = server.cli("logs", "job/flood", "-t", "acme", "--tail", "1").stdout
            # The newest output (the line being written may be cut short): far past the head.
            assert last.startswith("w-0 | ") and int(last[6:18]) > 1000, last[:200]
            head = server.cli("logs", "job/flood", "-t", "acme", "--limit-bytes", str(2 * MIB))
            assert "w-0 | 000000000001 xxx" in head.stdout
            with server.http() as client:
                whole = client.get(
                    "/jobs/flood/logs", params={"tenant": "acme", "limitBytes": 8 * MIB}
                ).text
            assert "bytes of this task's output were dropped here" in whole
            print(
                "\nfull disk, capped flood:"
                f" beta writes p50 {statistics.median(quiet) * 1000:.1f} ms before,"
                f" p50 {statistics.median(loaded) * 1000:.1f} ms /"
                f" max {max(loaded) * 1000:.1f} ms during; log bytes on disk {used};"
                f" free {free_bytes(disk)} of {DISK_BYTES}; server before {before}, after {after}"
            )
            server.cli("cancel", "job/flood", "-t", "acme")
        finally:
            server.close()


def test_readiness_follows_the_room_on_the_store_disk(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", DISK_BYTES) as disk:
        server = ServerProcess(disk / "data", env=LIMITS).start()
        filler = disk / "filler"
        try:
            server.cli("apply", "-f", "-", input=SETUP + "---\n" + BETA)
            assert ready(server) == 200
            with filler.open("wb") as handle, contextlib.suppress(OSError):
                while True:  # until the disk is full (ENOSPC)
                    handle.write(b"\0" * MIB)
                    handle.flush()
            began = time.monotonic()
            while ready(server) != 503:
                assert time.monotonic() - began < 10, "ready on a full disk"
                time.sleep(0.2)
            noticed = time.monotonic() - began
            codes, _ = beta_writes(server, 5)
            filler.unlink()
            began = time.monotonic()
            while ready(server) != 200:
                assert time.monotonic() - began < 15, "not ready after room came back"
                time.sleep(0.2)
            back = time.monotonic() - began
            after, _ = beta_writes(server, 5)
            assert set(after) <= {200, 201}, after
            print(
                f"\nfull store disk: not ready after {noticed:.1f}s, writes then {codes};"
                f" ready {back:.1f}s after room came back"
            )
        finally:
            server.close()


def test_logs_in_a_directory_of_their_own_stay_off_the_store_disk(tmp_path: Path) -> None:
    with (
        small_disk(tmp_path / "store", DISK_BYTES) as store_disk,
        small_disk(tmp_path / "logs", 16 * MIB) as log_disk,
    ):
        env = {**LIMITS, "AIPAAS_TASK_LOG_DIR": str(log_disk / "tasks")}
        server = ServerProcess(store_disk / "data", env=env).start()
        try:
            server.cli("apply", "-f", "-", input=SETUP + "---\n" + BETA)
            store_free = free_bytes(store_disk)
            server.cli("apply", "-f", "-", input=FLOOD.format(python=TASK_PYTHON))
            server.wait_phase("flood", "Running")
            time.sleep(3)
            codes, _ = beta_writes(server, 10)
            assert set(codes) <= {200, 201}, codes
            assert not (store_disk / "data" / "logs").exists()
            assert 1 * MIB <= used_bytes(log_disk) <= 4 * MIB
            # The store's disk lost only what the store wrote (a few pages), nothing of the log.
            assert store_free - free_bytes(store_disk) < 1 * MIB
            last = server.cli("logs", "job/flood", "-t", "acme", "--tail", "1").stdout
            assert last.startswith("w-0 | ")
            server.cli("cancel", "job/flood", "-t", "acme")
        finally:
            server.close()
