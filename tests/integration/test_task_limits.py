"""CPU and memory limits of local tasks (``tasks[].limits``) through a real root server: a task
over its memory limit ends OOMKilled, saying so; a CPU limit is a CFS quota the task runs
under; a task's groups are gone after it ends; a bad limit is refused naming its field."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from aipaas.backends.local.limits import GROUP_DIR, ROOT, own_group
from tests.support.server_process import TASK_PYTHON, ServerProcess, shared_dir

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not (ROOT / "memory" / "cgroup.procs").exists(),
    reason="limits need a root server and the cgroup v1 memory and cpu controllers",
)

HOG = """
chunks = []
for _ in range(40):
    chunks.append(bytearray(16 << 20))  # 640 MiB in all, each page written
print("never here")
"""

QUOTA = """
import json, os, sys, time
groups = dict(line.split(":", 2)[1:] for line in open("/proc/self/cgroup").read().splitlines())
cpu = [path for names, path in groups.items() if "cpu" in names.split(",")][0].strip()
quota = int(open(f"/sys/fs/cgroup/cpu{cpu}/cpu.cfs_quota_us").read())
start, used = time.monotonic(), time.process_time()
while time.monotonic() - start < 2:
    pass
busy = time.process_time() - used
json.dump({"group": cpu, "quota": quota, "busy": busy}, open(sys.argv[1] + "/cpu.json", "w"))
"""


def job(name: str, script: str, limits: str, *args: str) -> str:
    command = json.dumps([TASK_PYTHON, "-c", script, *args])
    return (
        "apiVersion: aipaas/v1\nkind: Job\n"
        f"metadata: {{name: {name}, tenant: acme}}\n"
        "spec:\n  queue: research\n  tasks:\n    - name: worker\n"
        f"      command: {command}\n"
        "      resources: {cpu: 100m, memory: 64Mi}\n"
        f"      limits: {limits}\n"
    )


def apply(server: ServerProcess, text: str) -> None:
    with server.http() as client:
        client.post("/apply", content=text).raise_for_status()


def test_a_task_over_its_memory_limit_ends_oomkilled(tenant_server: ServerProcess) -> None:
    apply(tenant_server, job("hog", HOG, "{memory: 96Mi}"))
    status = tenant_server.wait_phase("hog", "Failed", timeout=90)["status"]
    task = status["tasks"][0]
    assert task["exitCode"] == 137
    assert task["message"].startswith("OOMKilled"), task
    uid = tenant_server.job("hog")["metadata"]["uid"]
    groups = ROOT / "memory" / own_group("memory").lstrip("/") / GROUP_DIR

    def left() -> list[Path]:
        return [g for g in groups.glob(f"{uid}.*") if g.is_dir()]

    deadline = time.monotonic() + 10
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left(), "the task's group is removed when it ends"


def test_a_cpu_limit_is_a_cfs_quota_the_task_runs_under(tenant_server: ServerProcess) -> None:
    out = shared_dir()
    apply(tenant_server, job("slow", QUOTA, "{cpu: 200m}", str(out)))
    tenant_server.wait_phase("slow", "Succeeded", timeout=90)
    seen = json.loads((out / "cpu.json").read_text())
    assert seen["quota"] == 20_000  # 200m: 20 ms of each 100 ms period
    assert seen["group"].endswith(f"/{GROUP_DIR}/" + Path(seen["group"]).name)
    assert seen["busy"] < 0.7, seen  # 2 s of spinning, about 0.4 s of CPU under the quota


def test_a_limit_that_is_no_quantity_is_refused_naming_its_field(
    tenant_server: ServerProcess,
) -> None:
    with tenant_server.http() as client:
        answer = client.post("/apply", content=job("bad", "pass", "{memory: 0}"))
    assert answer.status_code == 422
    assert "spec.tasks[0].limits.memory" in answer.text
