"""Preemption and elastic membership against a real `aipaas up` on the local backend: real
processes, run as the tenant's user when the server is root (issue 11 items 3 and 5).

A critical job evicts a running low-priority job: its process is stopped, the job goes back to
Pending (not Failed) and runs again once there is room, without using up its restarts. An
elastic job's tasks read WORLD_SIZE and the membership file the controller keeps, which the
local backend writes where the tenant's own tasks can read it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server_process import SETUP, TASK_PYTHON, ServerProcess, shared_dir

SLEEPER = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, tenant: acme}}
spec:
  queue: research
  priority: {priority}
  tasks:
    - name: w
      replicas: 1
      command: [{python}, -c, "import time; time.sleep({seconds})"]
      resources: {{cpu: 4, memory: 128Mi}}
"""
MEMBER = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: elastic, tenant: acme}}
spec:
  queue: research
  minAvailable: 1
  tasks:
    - name: w
      replicas: 2
      command:
        - {python}
        - -c
        - |
          import os, time
          text = open(os.environ["AIPAAS_MEMBERSHIP_FILE"]).read()
          name = "member-" + os.environ["RANK"]
          with open(os.path.join({out!r}, name), "w") as handle:
              handle.write(os.environ["WORLD_SIZE"] + "\\n" + text)
          # Stay a member until the other has read its file: a rank that ended first would
          # leave the other a membership of one (the file follows who runs).
          for _ in range(600):
              if all(os.path.exists(os.path.join({out!r}, f"member-{{r}}")) for r in (0, 1)):
                  break
              time.sleep(0.1)
      resources: {{cpu: 1, memory: 128Mi}}
"""


@pytest.fixture
def up_server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path / "data", verb="up").start()
    with process.http() as client:
        client.post("/apply", content=SETUP).raise_for_status()
    yield process
    process.close()


def apply(server: ServerProcess, manifest: str) -> None:
    with server.http() as client:
        client.post("/apply", content=manifest).raise_for_status()


def status(server: ServerProcess, name: str) -> dict[str, Any]:
    return server.job(name).get("status") or {}


def wait(server: ServerProcess, what: str, done: Any, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}: not reached in {timeout}s")


def test_a_critical_job_preempts_and_the_victim_runs_again(up_server: ServerProcess) -> None:
    server = up_server
    for name in ("low-a", "low-b"):  # 8 CPUs: the two fill the machine
        apply(server, SLEEPER.format(name=name, priority="low", python=TASK_PYTHON, seconds=600))
        server.wait_phase(name, "Running")
    apply(server, SLEEPER.format(name="urgent", priority="critical", python=TASK_PYTHON, seconds=2))

    found: list[str] = []

    def evicted_one() -> bool:
        for name in ("low-a", "low-b"):
            now = status(server, name)
            tasks = now.get("tasks") or []
            if now.get("reason") == "Preempted" or (tasks and tasks[0].get("restarts", 0) >= 1):
                found.append(name)
                return True
        return False

    wait(server, "a low job evicted", evicted_one)
    evicted = found[0]
    kept = "low-b" if evicted == "low-a" else "low-a"
    reasons = [e["reason"] for e in server.cli_json("events", "--tenant", "acme")]
    assert "Preempted" in reasons
    server.wait_phase("urgent", "Succeeded", timeout=120)
    assert server.phase(kept) == "Running"
    # The victim runs again in the room the critical job left: not Failed, one restart.
    job = server.wait_phase(evicted, "Running", timeout=120)
    assert job["status"]["tasks"][0]["restarts"] == 1


GPU_JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, tenant: acme, annotations: {{sim.aipaas.dev/duration: '{seconds}'}}}}
spec:
  queue: research
  priority: {priority}
  tasks:
    - name: w
      replicas: 1
      command: [train]
      resources: {{cpu: 8, memory: 64Gi, gpu: 8}}
"""


def test_gpu_preemption_on_the_sim_backend_whose_nodes_publish_slices(tmp_path: Path) -> None:
    """`--backend sim` publishes ResourceSlices, so ``gpu: 8`` is a DRA claim: the critical job
    still evicts one low job (its claim's devices freed once its stop is confirmed), runs on
    them, and the victim runs again."""
    server = ServerProcess(tmp_path / "data", backend="sim").start()
    try:
        apply(server, SETUP)
        for name in ("low-a", "low-b"):  # the sim cluster's 16 GPUs
            apply(server, GPU_JOB.format(name=name, priority="low", seconds=600))
            server.wait_phase(name, "Running")
        claims = server.cli_json("get", "resourceclaims", "--tenant", "acme")
        assert len(claims["items"] if isinstance(claims, dict) else claims) == 2  # compiled
        apply(server, GPU_JOB.format(name="urgent", priority="critical", seconds=2))
        server.wait_phase("urgent", "Succeeded", timeout=120)
        phases = {n: status(server, n) for n in ("low-a", "low-b")}
        victims = [n for n, s in phases.items() if (s.get("tasks") or [{}])[0].get("restarts")]
        assert len(victims) == 1, phases
        job = server.wait_phase(victims[0], "Running", timeout=120)
        assert job["status"]["tasks"][0]["restarts"] == 1
    finally:
        server.stop()


def test_elastic_tasks_read_world_size_and_membership(up_server: ServerProcess) -> None:
    server = up_server
    out = shared_dir()
    apply(server, MEMBER.format(python=TASK_PYTHON, out=str(out)))
    server.wait_phase("elastic", "Succeeded", timeout=120)
    for rank in (0, 1):
        size, text = (out / f"member-{rank}").read_text().split("\n", 1)
        assert size == "2"
        members = json.loads(text)
        assert members["size"] == 2
        assert [m["name"] for m in members["members"]] == ["w-0", "w-1"]
