"""The environment of a gang's tasks on the Slurm backend (real daemons: slurm_cluster.py) is
the platform's, and Slurm's own rank variables agree with it: each task is a batch job of one
task, so Slurm alone would say SLURM_PROCID=0 and SLURM_NTASKS=1 in every one of them (PyTorch
Lightning and submitit would take each for rank 0 of a job of one), with root's HOME."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aipaas.backends.slurm.jobs import TASK_PATH
from tests.integration.slurm_cluster import SlurmCluster, slurm_cluster
from tests.support.server_process import SETUP, ServerProcess

__all__ = ["slurm_cluster"]  # the fixture, used by name

NAMES = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NTASKS_PER_NODE",
    "HOME",
    "PATH",
]
SHOW = " ".join(f"{name}=${{{name}}}" for name in NAMES)
JOB = f"""---
apiVersion: aipaas/v1
kind: Job
metadata: {{name: ranks, tenant: acme}}
spec:
  queue: research
  tasks:
    - name: w
      replicas: 3
      command: [/bin/bash, -c, 'echo "{SHOW}"']
      resources: {{cpu: 1, memory: 64Mi}}
"""


@pytest.fixture
def slurm_server(tmp_path: Path, slurm_cluster: SlurmCluster) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path / "data", backend="slurm", extra=["--slurm-conf", str(slurm_cluster.conf)]
    ).start()
    with server.http() as client:
        client.post("/apply", content=SETUP).raise_for_status()
    yield server
    server.stop()


def test_slurm_rank_variables_match_the_platforms_in_every_task(
    slurm_server: ServerProcess,
) -> None:
    with slurm_server.http() as client:
        client.post("/apply", content=JOB).raise_for_status()
    slurm_server.wait_phase("ranks", "Succeeded", timeout=90)
    lines = slurm_server.cli("logs", "job/ranks", "-t", "acme").stdout.splitlines()
    seen = [dict(part.split("=", 1) for part in line.partition(" | ")[2].split()) for line in lines]
    assert sorted(env["RANK"] for env in seen) == ["0", "1", "2"], lines
    for env in seen:
        assert env["SLURM_PROCID"] == env["RANK"]
        assert env["SLURM_NTASKS"] == env["WORLD_SIZE"] == "3"
        assert env["SLURM_LOCALID"] == env["LOCAL_RANK"]
        assert env["SLURM_NODEID"] == env["NODE_RANK"]
        assert env["SLURM_NTASKS_PER_NODE"] == env["LOCAL_WORLD_SIZE"]
        assert env["HOME"] != "/root" and env["PATH"] == TASK_PATH
    # Ranks on one node count 0.. there; nodes count in the order of their lowest rank.
    by_node: dict[str, list[str]] = {}
    for env in sorted(seen, key=lambda e: int(e["RANK"])):
        by_node.setdefault(env["NODE_RANK"], []).append(env["LOCAL_RANK"])
    assert sorted(by_node) == [str(n) for n in range(len(by_node))]
    assert all(local == [str(n) for n in range(len(local))] for local in by_node.values())
