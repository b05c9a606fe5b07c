"""Slurm as a third-party scheduler (`--slurm-mode third-party`) against real daemons: aipaas
offers each partition as one node and submits to the partition; Slurm places and queues. When
work that is not aipaas's fills the partition, aipaas's task waits in Slurm (Starting, with
Slurm's reason) and runs when Slurm frees room."""

from __future__ import annotations

import time
from pathlib import Path

from tests.integration.slurm_cluster import SlurmCluster, slurm_cluster
from tests.support.server_process import SETUP, ServerProcess

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


def server(data: Path, cluster: SlurmCluster) -> ServerProcess:
    options = ["--slurm-conf", str(cluster.conf), "--slurm-mode", "third-party"]
    return ServerProcess(data, backend="slurm", extra=options).start()


def test_slurm_queues_the_task_while_its_partition_is_full(
    tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    """...and a server killed while Slurm holds the task, before it wrote the job's id down,
    adopts the job after its restart instead of submitting it again."""
    data = tmp_path / "data"
    first = server(data, slurm_cluster)
    second: ServerProcess | None = None
    # Someone else's job holds every GPU of the partition.
    filler = slurm_cluster.run(
        "sbatch",
        "--parsable",
        "--nodes=2",
        "--gres=gpu:4",
        "--mem=64M",
        "--output=/dev/null",  # not slurm-N.out in the tests' directory
        "--wrap",
        "sleep 120",
    ).strip()
    try:
        with first.http() as client:
            client.post("/apply", content=SETUP).raise_for_status()
            nodes = [n["metadata"]["name"] for n in client.get("/nodes").json()["items"]]
            assert nodes == ["slurm-partition-main"]
            client.post("/apply", content=JOB).raise_for_status()
        uid = str(first.job("queued")["metadata"]["uid"])
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
            tasks = (first.job("queued").get("status") or {}).get("tasks") or [{}]
            task = tasks[0]
            if pending and "(Resources)" in task.get("message", ""):
                break
            time.sleep(0.25)
        assert len(pending) == 1, "the task's Slurm job never waited"
        assert (pending[0]["state_reason"], pending[0]["partition"]) == ("Resources", "main")
        assert task["phase"] == "Starting"
        assert task["message"].startswith("pending in Slurm (Resources), job "), task

        first.kill9()
        # As if it died right after sbatch: the job's id was never written down.
        (job_file,) = (data / "run" / "slurm").glob(f"{uid}.*/job")
        job_file.unlink()
        second = server(data, slurm_cluster)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not job_file.exists():
            time.sleep(0.25)
        assert job_file.read_text() == str(pending[0]["job_id"])  # adopted by its name
    finally:
        slurm_cluster.run("scancel", filler)
        first.stop()
    try:
        assert second is not None
        done = second.wait_phase("queued", "Succeeded", timeout=60)
        assert done["status"]["tasks"][0]["message"] in ("", "exit code 0")
        lines = second.cli("logs", "job/queued", "-t", "acme").stdout.splitlines()
        assert len(lines) == 1 and lines[0].startswith("w-0 | ran on n")
        submitted = [j for j in slurm_cluster.jobs() if str(j["name"]).startswith(f"aipaas.{uid}.")]
        assert [j["job_state"] for j in submitted] == ["COMPLETED"]  # submitted once
    finally:
        if second is not None:
            second.stop()
