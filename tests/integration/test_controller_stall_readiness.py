"""/readyz follows the controller loop: a cycle stuck on a file that never answers makes the
server not ready within the stall bound, and ready again once the cycle moves on."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx

from tests.support.server_process import SETUP, TASK_PYTHON, ServerProcess, shared_dir

STALL_SECONDS = 3
HOLD = """---
apiVersion: aipaas/v1
kind: Job
metadata: {{name: hold, tenant: acme}}
spec:
  queue: research
  tasks:
    - name: w
      command:
        - {python}
        - -c
        - "import os, time\\nwhile not os.path.exists({release!r}): time.sleep(0.1)"
      resources: {{cpu: 100m, memory: 64Mi}}
"""


def readiness(server: ServerProcess) -> int:
    return httpx.get(server.url + "/readyz", timeout=10).status_code


def wait_readiness(server: ServerProcess, want: int, timeout: float) -> float:
    """Seconds until /readyz answers ``want``."""
    began = time.monotonic()
    while readiness(server) != want:
        assert time.monotonic() - began < timeout, f"/readyz never answered {want}"
        time.sleep(0.2)
    return time.monotonic() - began


def test_a_stuck_controller_cycle_makes_the_server_not_ready_until_it_moves(
    tmp_path: Path,
) -> None:
    release = shared_dir() / "release"
    data = tmp_path / "data"
    server = ServerProcess(
        data, env={"AIPAAS_CONTROLLER_STALL_SECONDS": str(STALL_SECONDS)}
    ).start()
    try:
        server.cli(
            "apply", "-f", "-", input=SETUP + HOLD.format(python=TASK_PYTHON, release=str(release))
        )
        job = server.wait_phase("hold", "Running")
        assert readiness(server) == 200
        # The task's pid record becomes a FIFO nobody writes: the next cycle's status call
        # reads it and waits, as on a hung disk or a backend that never answers.
        pid_file = data / "run" / f"{job['metadata']['uid']}.w-0.0" / "pid"
        pid = pid_file.read_text()
        pid_file.unlink()
        os.mkfifo(pid_file, 0o600)
        waited = wait_readiness(server, 503, timeout=STALL_SECONDS + 20)
        assert waited >= STALL_SECONDS - 1, f"not ready after {waited:.1f}s only"
        assert readiness(server) == 503  # and it stays so while the cycle is stuck
        # The cycle moves on: the FIFO answers and a plain file takes its place.
        writer = os.open(pid_file, os.O_WRONLY)  # the waiting reader lets this open at once
        temporary = pid_file.with_name("pid.tmp")
        temporary.write_text(pid)
        os.replace(temporary, pid_file)
        os.write(writer, pid.encode())
        os.close(writer)
        wait_readiness(server, 200, timeout=20)
        release.touch()
        server.wait_phase("hold", "Succeeded")
        assert "not ready: the controller's cycle has run for" in server.log.read_text()
    finally:
        release.touch()
        server.close()
