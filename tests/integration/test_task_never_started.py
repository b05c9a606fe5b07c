"""A server killed after it claimed a task's start but before the task's process started:
after the restart the task is started (same attempt, not counted), not failed as lost."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.support.server_process import SETUP, TASK_PYTHON, ServerProcess, shared_dir

JOBS = """---
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
      resources: {{cpu: 8, memory: 64Mi}}
---
apiVersion: aipaas/v1
kind: Job
metadata: {{name: fresh, tenant: acme}}
spec:
  queue: research
  tasks:
    - name: w
      command: [{python}, -c, "print('fresh ran')"]
      resources: {{cpu: 1, memory: 64Mi}}
"""


def test_a_task_whose_start_died_with_the_server_is_started_after_the_restart(
    tmp_path: Path,
) -> None:
    release = shared_dir() / "release"
    data = tmp_path / "data"
    first = ServerProcess(data).start()  # 8 CPUs: "hold" takes them all, "fresh" waits
    try:
        first.cli(
            "apply", "-f", "-", input=SETUP + JOBS.format(python=TASK_PYTHON, release=str(release))
        )
        first.wait_phase("hold", "Running")
        assert first.phase("fresh") == "Pending"
        uid = first.job("fresh")["metadata"]["uid"]
        # Its log is a FIFO nobody reads: the start, after its claim, waits opening it.
        log = data / "logs" / "acme" / f"fresh-{uid[:8]}" / "w-0.log"
        log.parent.mkdir(parents=True, mode=0o700)
        os.mkfifo(log, 0o600)
        release.touch()
        claim = data / "run" / f"{uid}.w-0.0"
        deadline = time.monotonic() + 60
        while not (claim / "launch.json").exists():
            assert time.monotonic() < deadline, "the start was never claimed"
            time.sleep(0.1)
        time.sleep(0.5)
        assert not (claim / "pid").exists()  # claimed, never started
    finally:
        first.kill9()
    log.unlink()
    second = ServerProcess(data).start()
    try:
        job = second.wait_phase("fresh", "Succeeded", timeout=90)
        (task,) = job["status"]["tasks"]
        assert task["restarts"] == 0 and task["phase"] == "Succeeded", task
        assert "fresh ran" in second.cli("logs", "job/fresh", "-t", "acme").stdout
        reasons = [e["reason"] for e in second.cli_json("events", "job", "fresh", "-t", "acme")]
        assert "TaskFailed" not in reasons and "TaskLost" not in reasons, reasons
    finally:
        second.close()
