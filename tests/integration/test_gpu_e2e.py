"""On a machine with an NVIDIA GPU: jobs through a real server run on the GPU they were given.

Without a GPU (CI) every test here skips and says so. The task scripts use PyTorch when the
Python running them has it, to prove the GPU really computes; else they report what CUDA
would see (CUDA_VISIBLE_DEVICES) and NVML's own view.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pynvml
import pytest

from tests.support.server_process import SETUP, TASK_PYTHON, ServerProcess

pytestmark = pytest.mark.gpu

PROBE = r"""
import json, os, time
started = time.time()
report = {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "started": started}
try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    report["count"] = torch.cuda.device_count()
    a = torch.ones((1024, 1024), device="cuda")
    report["sum"] = float((a @ a).sum())  # 1024 * 1024 * 1024
    report["name"] = torch.cuda.get_device_name(0)
time.sleep(float(os.environ.get("HOLD", "0")))
report["ended"] = time.time()
print("REPORT " + json.dumps(report), flush=True)
"""


def _gpu_uuids() -> list[str]:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        pytest.skip(f"no NVIDIA GPU here: NVML could not start ({err})")
    try:
        count = pynvml.nvmlDeviceGetCount()
        return [
            str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
            for i in range(count)
        ] or pytest.skip("NVML reports no GPU")
    finally:
        pynvml.nvmlShutdown()


def _job(name: str, gpu: str, hold: float) -> str:
    command = json.dumps([TASK_PYTHON, "-c", PROBE])  # one the tenant's user may run
    return (
        "apiVersion: aipaas/v1\nkind: Job\n"
        f"metadata: {{name: {name}, tenant: acme}}\n"
        "spec:\n  queue: research\n  tasks:\n    - name: probe\n"
        f"      command: {command}\n"
        f"      env: {{HOLD: '{hold}'}}\n"
        f"      resources: {{cpu: 1, memory: 1Gi, gpu: {gpu}}}\n"
    )


def _report(server: ServerProcess, job: str) -> dict[str, Any]:
    log = server.cli("logs", job, "--tenant", "acme").stdout
    # Lines come back as "TASK | TEXT".
    lines = [line.partition("REPORT ")[2] for line in log.splitlines() if "REPORT " in line]
    assert lines, f"job {job} printed no report: {log[-2000:]}"
    report: dict[str, Any] = json.loads(lines[-1])
    return report


@pytest.fixture
def gpu_server(tmp_path: Path) -> Any:
    _gpu_uuids()
    process = ServerProcess(tmp_path / "data", backend="local").start()
    process.cli("apply", "-f", "-", input=SETUP)
    yield process
    process.stop()


def test_a_whole_gpu_job_runs_on_its_gpu(gpu_server: ServerProcess) -> None:
    gpu_server.cli("apply", "-f", "-", input=_job("whole", "1", 0))
    done = gpu_server.wait_phase("whole", "Succeeded", timeout=120)
    assert done["status"]["tasks"][0]["exitCode"] == 0
    report = _report(gpu_server, "whole")
    assert report["visible"] is not None and len(report["visible"].split(",")) == 1
    if "count" in report:
        assert report["count"] == 1
        assert report["sum"] == 1024.0**3


def test_two_half_gpu_jobs_share_one_gpu_at_once(gpu_server: ServerProcess) -> None:
    if len(_gpu_uuids()) != 1:
        pytest.skip("the sharing check is written for a machine with one GPU")
    for name in ("half-a", "half-b"):
        gpu_server.cli("apply", "-f", "-", input=_job(name, "0.5", 4))
    for name in ("half-a", "half-b"):
        gpu_server.wait_phase(name, "Succeeded", timeout=120)
    a, b = _report(gpu_server, "half-a"), _report(gpu_server, "half-b")
    assert a["visible"] == b["visible"]  # the same GPU
    assert a["started"] < b["ended"] and b["started"] < a["ended"]  # at the same time
    if "count" in a:
        assert a["sum"] == b["sum"] == 1024.0**3
