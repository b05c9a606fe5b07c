"""Slurm as a third-party scheduler (`--slurm-mode third-party`) against real daemons: aipaas
offers each partition as one node and submits to the partition; Slurm places and queues. When
work that is not aipaas's fills the partition, aipaas's task waits in Slurm (Starting, with
Slurm's reason) and runs when Slurm frees room."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_process import SETUP, ServerProcess
from slurm_cluster import SlurmCluster, slurm_cluster

__all__ = ["slurm_cluster"]  # the fixture, used by name

JOB = """---
apiVersion: aipaas/v1
kind: Job
metadata: {name: queued, tenant: acme}
spec:
  queue: research
  tasks:
    - name: w
      command: [/bin/bash, -c, 'echo "ran on $SLURMD_NODENAME with GPU $CUDA_VISIBLE_DEVICES"']
      resources: {cpu: 1, memory: 128Mi, gpu: 1}
"""


@pytest.fixture
def third_party(tmp_path: Path, slurm_cluster: SlurmCluster) -> Iterator[ServerProcess]:
    options = ["--slurm-conf", str(slurm_cluster.conf), "--slurm-mode", "third-party"]
    server = ServerProcess(tmp_path / "data", backend="slurm", extra=options).start()
    with server.http() as client:
        client.post("/apply", content=SETUP).raise_for_status()
    yield server
    server.stop()


def test_slurm_queues_the_task_while_its_partition_is_full(
    third_party: ServerProcess, slurm_cluster: SlurmCluster
) -> None:
    # Someone else's job holds every GPU of the partition.
    filler = slurm_cluster.run(
        "sbatch", "--parsable", "--nodes=2", "--gres=gpu:4", "--mem=64M", "--wrap", "sleep 120"
    ).strip()
    try:
        with third_party.http() as client:
            nodes = [n["metadata"]["name"] for n in client.get("/nodes").json()["items"]]
            assert nodes == ["slurm-partition-main"]
            client.post("/apply", content=JOB).raise_for_status()
        uid = str(third_party.job("queued")["metadata"]["uid"])
        # Slurm says Priority (or None) until its scheduler has seen the job, then Resources.
        deadline = time.monotonic() + 30
        pending: list[dict[str, object]] = []
        task: dict[str, str] = {}
        while time.monotonic() < deadline:
            pending = [
                j
                for j in slurm_cluster.jobs()
                if str(j["name"]).startswith(f"aipaas.{uid}.") and j["job_state"] == "PENDING"
            ]
            tasks = (third_party.job("queued").get("status") or {}).get("tasks") or [{}]
            task = tasks[0]
            if pending and "(Resources)" in task.get("message", ""):
                break
            time.sleep(0.25)
        assert len(pending) == 1, "the task's Slurm job never waited"
        assert (pending[0]["state_reason"], pending[0]["partition"]) == ("Resources", "main")
        assert task["phase"] == "Starting"
        assert task["message"].startswith("pending in Slurm (Resources), job "), task
    finally:
        slurm_cluster.run("scancel", filler)
    done = third_party.wait_phase("queued", "Succeeded", timeout=60)
    assert done["status"]["tasks"][0]["message"] in ("", "exit code 0")
    lines = third_party.cli("logs", "job/queued", "-t", "acme").stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("w-0 | ran on n")
