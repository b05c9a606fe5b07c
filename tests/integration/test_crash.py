"""kill -9 of the server while jobs run, then a restart: every job reaches the state it should,
no task runs twice at once, no GPU is allocated twice."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

from tests.support.server_process import SETUP, TASK_PYTHON, ServerProcess, shared_dir

CLUSTER = """nodes:
  - {name: dgx, count: 2, cpu: 64, memory: 512Gi, gpus: {count: 8, model: H100, memory: 80Gi}}
"""
LOCAL_JOB = """---
apiVersion: aipaas/v1
kind: Job
metadata: {{name: cpu-{index}, tenant: acme}}
spec:
  queue: research
  tasks:
    - name: w
      replicas: 2
      command:
        - {python}
        - -c
        - |
          import os, time
          path = os.path.join({out!r}, os.environ["AIPAAS_JOB"] + "-" + os.environ["RANK"])
          with open(path, "a") as handle:
              handle.write("start\\n")
          # Held until the test has killed and restarted the server (a release file), so it
          # surely runs across the restart however slow the machine.
          deadline = time.monotonic() + 300
          while not os.path.exists({release!r}) and time.monotonic() < deadline:
              time.sleep(0.1)
          with open(path, "a") as handle:
              handle.write("end\\n")
      resources: {{cpu: 100m, memory: 64Mi}}
"""
GPU_JOB = """---
apiVersion: aipaas/v1
kind: Job
metadata:
  name: gpu-{index}
  tenant: acme
  annotations: {{sim.aipaas.dev/duration: "6"}}
spec:
  queue: research
  tasks:
    - name: w
      replicas: 2
      command: [train]
      resources: {{cpu: 1, gpu: {{count: 4, model: H100}}}}
"""


def check_gpus_unique(server: ServerProcess) -> int:
    """Every (node, GPU) held by at most one running task; returns how many are held."""
    held: dict[tuple[str, int], list[str]] = defaultdict(list)
    with server.http() as client:
        for job in client.get("/jobs", params={"tenant": "acme"}).json()["items"]:
            for task in (job.get("status") or {}).get("tasks", []):
                if task["phase"] in ("Starting", "Running"):
                    for gpu in task["gpus"]:
                        held[(task["node"], gpu)].append(
                            f"{job['metadata']['name']}/{task['name']}"
                        )
    doubled = {key: owners for key, owners in held.items() if len(owners) > 1}
    assert not doubled, f"GPUs allocated twice: {doubled}"
    return len(held)


def test_kill_9_and_restart(tmp_path: Path, db_url: str | None) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    out = shared_dir()  # tasks run as the tenant's user: pytest's tmp is not theirs
    release = out / "release"
    data = tmp_path / "data"
    options = ["--sim-cluster", str(cluster)]
    first = ServerProcess(data, backend="demo", db=db_url, extra=options).start()
    try:
        manifest = (
            SETUP
            + "".join(
                LOCAL_JOB.format(index=i, python=TASK_PYTHON, out=str(out), release=str(release))
                for i in range(3)
            )
            + "".join(GPU_JOB.format(index=i) for i in range(4))
        )
        first.cli("apply", "-f", "-", input=manifest)
        # Two GPU jobs run at once (all 16 GPUs), two wait: polled, as a slow machine may look
        # first between two jobs; never a GPU held twice on the way.
        deadline = time.monotonic() + 60
        while check_gpus_unique(first) != 16:
            assert time.monotonic() < deadline, "the GPU jobs never held all 16 GPUs at once"
            time.sleep(0.2)
        for index in range(3):
            first.wait_phase(f"cpu-{index}", "Running")
    finally:
        first.kill9()

    second = ServerProcess(data, backend="demo", db=db_url, extra=options).start()
    release.touch()
    try:
        deadline = time.monotonic() + 120
        names = [f"cpu-{i}" for i in range(3)] + [f"gpu-{i}" for i in range(4)]
        while time.monotonic() < deadline:
            check_gpus_unique(second)
            if all(second.phase(name) == "Succeeded" for name in names):
                break
            time.sleep(0.3)
        phases = {name: second.phase(name) for name in names}
        assert set(phases.values()) == {"Succeeded"}, phases
    finally:
        second.stop()
    for index in range(3):
        for rank in range(2):
            # Started once, ended once: not lost, not started again after the restart.
            assert (out / f"cpu-{index}-{rank}").read_text() == "start\nend\n"
