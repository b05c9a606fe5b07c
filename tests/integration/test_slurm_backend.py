"""The Slurm backend against real daemons (slurm_cluster.py: munged, slurmctld, two slurmds n1
and n2 with four fake A100s each) driven by a real `aipaas server --backend slurm`: a gang with
GPUs, logs by task, restarts, cancel, kill -9 of the server, and a node drained mid-run.

Slurm jobs are counted by the aipaas job's uid (their names are ``aipaas.<uid>.<task>.<n>``),
so jobs of the module's other tests never count."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.slurm_cluster import SlurmCluster, slurm_cluster
from tests.support.server_process import SETUP, ServerProcess

__all__ = ["slurm_cluster"]  # the fixture, used by name

JOB = """---
apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, tenant: acme}}
spec:
  queue: research
  tasks:
    - name: w
      replicas: {replicas}
      restartPolicy: {policy}
      backoffLimit: 2
      command: [/bin/bash, -c, {script!r}]
      resources: {{cpu: 1, memory: 128Mi{gpu}}}
"""

SHOW_ENV = (
    'echo "rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT '
    'node=$SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES"'
)


def job(name: str, script: str, *, replicas: int = 1, gpus: int = 0, policy: str = "Never") -> str:
    gpu = f", gpu: {gpus}" if gpus else ""
    return JOB.format(name=name, replicas=replicas, policy=policy, script=script, gpu=gpu)


@pytest.fixture
def slurm_server(tmp_path: Path, slurm_cluster: SlurmCluster) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path / "data", backend="slurm", extra=["--slurm-conf", str(slurm_cluster.conf)]
    ).start()
    apply(server, SETUP)
    yield server
    server.stop()


def apply(server: ServerProcess, manifest: str) -> None:
    with server.http() as client:
        client.post("/apply", content=manifest).raise_for_status()


def uid_of(server: ServerProcess, name: str) -> str:
    return str(server.job(name)["metadata"]["uid"])


def slurm_jobs_of(cluster: SlurmCluster, uid: str, active: bool = False) -> list[dict[str, Any]]:
    found = cluster.active_jobs() if active else cluster.jobs()
    return [j for j in found if str(j["name"]).startswith(f"aipaas.{uid}.")]


def wait_for(what: str, check: Callable[[], bool], timeout: float = 40) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def logs(server: ServerProcess, name: str) -> list[str]:
    return server.cli("logs", f"job/{name}", "-t", "acme").stdout.splitlines()


def test_inventory_shows_slurm_nodes_with_gpus(slurm_server: ServerProcess) -> None:
    def nodes() -> dict[str, Any]:
        with slurm_server.http() as client:
            items = client.get("/nodes").json()["items"]
        return {n["metadata"]["name"]: n for n in items}

    wait_for("the Slurm nodes", lambda: {"n1", "n2"} <= set(nodes()))
    node = nodes()["n1"]
    assert node["spec"]["backend"] == "slurm"
    assert node["spec"]["gpus"]["count"] == 4 and node["spec"]["gpus"]["model"] == "A100"
    assert node["metadata"]["labels"]["slurm.aipaas.dev/partition-main"] == "true"


def test_gang_with_gpus_runs_with_its_env_and_logs_by_task(
    slurm_server: ServerProcess, slurm_cluster: SlurmCluster
) -> None:
    apply(slurm_server, job("gang", SHOW_ENV, replicas=2, gpus=2))
    done = slurm_server.wait_phase("gang", "Succeeded", timeout=60)
    tasks = {t["name"]: t for t in done["status"]["tasks"]}
    lines = logs(slurm_server, "gang")
    assert len(lines) == 2, lines
    port = None
    devices: dict[str, list[str]] = {}  # node -> the GPUs its tasks were given
    for line in lines:
        task, _, text = line.partition(" | ")
        fields = dict(part.split("=", 1) for part in text.split())
        assert fields["rank"] == task.rsplit("-", 1)[1]
        assert fields["world"] == "2"
        assert fields["node"] == tasks[task]["node"]  # pinned where aipaas placed it
        assert len(fields["gpus"].split(",")) == 2  # Slurm's GRES binding: two devices
        devices.setdefault(fields["node"], []).extend(fields["gpus"].split(","))
        assert fields["master"].startswith("127.0.0.1:")  # n1/n2's NodeAddr
        assert port in (None, fields["master"]), "one rendezvous for the gang"
        port = fields["master"]
    for node_name, given in devices.items():  # two tasks on one node: different GPUs
        assert len(set(given)) == len(given), (node_name, given)
    submitted = slurm_jobs_of(slurm_cluster, uid_of(slurm_server, "gang"))
    assert len(submitted) == 2
    assert all(j["job_state"] == "COMPLETED" for j in submitted)
    assert all("gpu:2" in str(j.get("tres_per_node") or j.get("gres_detail")) for j in submitted)


def test_a_failing_task_restarts_per_policy(
    slurm_server: ServerProcess, slurm_cluster: SlurmCluster
) -> None:
    script = 'echo "attempt $AIPAAS_ATTEMPT"; [ "$AIPAAS_ATTEMPT" != 0 ] || exit 3'
    apply(slurm_server, job("flaky", script, policy="OnFailure"))
    done = slurm_server.wait_phase("flaky", "Succeeded", timeout=60)
    assert done["status"]["tasks"][0]["restarts"] == 1
    states = sorted(
        (j["name"].rsplit(".", 1)[1], j["job_state"])
        for j in slurm_jobs_of(slurm_cluster, uid_of(slurm_server, "flaky"))
    )
    assert states == [("0", "FAILED"), ("1", "COMPLETED")]
    assert logs(slurm_server, "flaky") == ["w-0 | attempt 0", "w-0 | attempt 1"]

    apply(slurm_server, job("broken", "exit 7", policy="Never"))
    failed = slurm_server.wait_phase("broken", "Failed", timeout=60)
    assert failed["status"]["tasks"][0]["exitCode"] == 7


def test_cancel_stops_the_slurm_jobs(
    slurm_server: ServerProcess, slurm_cluster: SlurmCluster
) -> None:
    marker = f"aipaas-slurm-cancel-{time.time_ns()}"
    apply(slurm_server, job("long", f"exec -a {marker} sleep 300", replicas=2))
    slurm_server.wait_phase("long", "Running", timeout=60)
    uid = uid_of(slurm_server, "long")
    wait_for("the sleeps", lambda: _processes(marker) == 2)
    with slurm_server.http() as client:
        client.post("/jobs/long/cancel", params={"tenant": "acme"}).raise_for_status()
    slurm_server.wait_phase("long", "Cancelled", timeout=30)
    wait_for("no Slurm job left", lambda: not slurm_jobs_of(slurm_cluster, uid, active=True))
    wait_for("no process left", lambda: _processes(marker) == 0, timeout=15)
    assert {j["job_state"] for j in slurm_jobs_of(slurm_cluster, uid)} == {"CANCELLED"}


def test_kill_9_of_the_server_then_a_restart_adopts_the_jobs(
    tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    data = tmp_path / "data"
    options = ["--slurm-conf", str(slurm_cluster.conf)]
    first = ServerProcess(data, backend="slurm", extra=options).start()
    try:
        apply(first, SETUP + job("survivor", "sleep 6; " + SHOW_ENV, replicas=2, gpus=1))
        first.wait_phase("survivor", "Running", timeout=60)
        uid = uid_of(first, "survivor")
    finally:
        first.kill9()
    assert len(slurm_jobs_of(slurm_cluster, uid, active=True)) == 2  # run on without it
    second = ServerProcess(data, backend="slurm", extra=options).start()
    try:
        done = second.wait_phase("survivor", "Succeeded", timeout=60)
        assert [t["restarts"] for t in done["status"]["tasks"]] == [0, 0]
        names = [j["name"] for j in slurm_jobs_of(slurm_cluster, uid)]
        assert sorted(names) == [f"aipaas.{uid}.w-0.0", f"aipaas.{uid}.w-1.0"]  # no duplicate
        assert len(logs(second, "survivor")) == 2
    finally:
        second.stop()


def test_a_drained_node_loses_its_task_which_runs_again_elsewhere(
    slurm_server: ServerProcess, slurm_cluster: SlurmCluster
) -> None:
    script = '[ "$AIPAAS_ATTEMPT" = 0 ] && exec sleep 300; echo "again on $SLURMD_NODENAME"'
    apply(slurm_server, job("moved", script, policy="OnFailure"))
    running = slurm_server.wait_phase("moved", "Running", timeout=60)
    first_node = running["status"]["tasks"][0]["node"]
    other = "n2" if first_node == "n1" else "n1"
    slurm_cluster.drain(first_node)
    try:
        done = slurm_server.wait_phase("moved", "Succeeded", timeout=60)
    finally:
        slurm_cluster.resume(first_node)
    task = done["status"]["tasks"][0]
    assert task["node"] == other and task["restarts"] == 1
    lines = logs(slurm_server, "moved")
    assert lines[-1] == f"w-0 | again on {other}"
    assert any(f"ON {first_node} CANCELLED" in line for line in lines[:-1]), lines
    with slurm_server.http() as client:
        events = client.get("/events", params={"tenant": "acme"}).json()["items"]
    assert any(e.get("reason") == "TaskLost" and first_node in str(e) for e in events), events
    states = sorted(
        j["job_state"] for j in slurm_jobs_of(slurm_cluster, uid_of(slurm_server, "moved"))
    )
    assert states == ["CANCELLED", "COMPLETED"]


def _processes(marker: str) -> int:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False)
    return len(found.stdout.split())
