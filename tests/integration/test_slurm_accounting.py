"""Usage from Slurm's accounting (slurmdbd + MariaDB started by the fixture): in third-party mode
a task that waits in Slurm's queue behind someone else's job is charged only for the time Slurm
ran it, as ``sacct`` records it: not its wait, and not the time a server that was down took to
see it end."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

from tests.integration.slurm_cluster import SlurmCluster, slurm_accounting_cluster
from tests.support.server_process import SETUP, ServerProcess

__all__ = ["slurm_accounting_cluster"]  # the fixture, used by name

RUN_SECONDS = 3
JOB = f"""---
apiVersion: aipaas/v1
kind: Job
metadata: {{name: queued, tenant: acme}}
spec:
  queue: research
  tasks:
    - name: w
      command: [/bin/sleep, "{RUN_SECONDS}"]
      resources: {{cpu: 1, memory: 128Mi, gpu: 1}}
"""


def server(data: Path, cluster: SlurmCluster) -> ServerProcess:
    options = ["--slurm-conf", str(cluster.conf), "--slurm-mode", "third-party"]
    return ServerProcess(data, backend="slurm", extra=options).start()


def accounted(cluster: SlurmCluster, job_id: str) -> tuple[datetime, datetime] | None:
    """(start, end) of a job that ended, from sacct; None while accounting has no end."""
    (job,) = json.loads(cluster.run("sacct", "--json", "-X", "-j", job_id))["jobs"]
    start, end = job["time"]["start"], job["time"]["end"]
    if not end:
        return None
    return datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC)


def wait_for(what: str, check: object, timeout: float = 60) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"never: {what}")


def test_a_task_queued_in_slurm_is_charged_for_the_time_slurm_ran_it(
    tmp_path: Path, slurm_accounting_cluster: SlurmCluster
) -> None:
    cluster = slurm_accounting_cluster
    data = tmp_path / "data"
    first = server(data, cluster)
    second: ServerProcess | None = None
    # Someone else's job holds every GPU of the partition for a while.
    filler = cluster.run(
        "sbatch", "--parsable", "--nodes=2", "--gres=gpu:4", "--mem=64M", "--output=/dev/null",
        "--wrap", "sleep 6",
    ).strip()  # fmt: skip
    try:
        with first.http() as client:
            client.post("/apply", content=SETUP).raise_for_status()
            client.post("/apply", content=JOB).raise_for_status()
        uid = str(first.job("queued")["metadata"]["uid"])

        def ours() -> list[dict[str, object]]:
            return [j for j in cluster.jobs() if str(j["name"]).startswith(f"aipaas.{uid}.")]

        wait_for("the task waits in Slurm", lambda: [j["job_state"] for j in ours()] == ["PENDING"])
        # The server is down while Slurm runs the task and it ends: the restarted server sees
        # it ended long after; the ledger still charges Slurm's own start and end.
        first.kill9()
        wait_for("Slurm ran the task", lambda: ours()[0]["job_state"] == "COMPLETED", 60)
        job_id = str(ours()[0]["job_id"])
        wait_for("accounting has the end", lambda: accounted(cluster, job_id) is not None)
        time.sleep(2)
        second = server(data, cluster)
        second.wait_phase("queued", "Succeeded", timeout=60)
        with second.http() as client:
            entries = client.get("/usage/entries", params={"tenant": "acme"}).json()["items"]
    finally:
        cluster.run("scancel", filler)
        first.stop()
        if second is not None:
            second.stop()
    times = accounted(cluster, job_id)
    assert times is not None
    start, end = times
    (filler_times,) = [accounted(cluster, filler)]
    assert filler_times is not None and start >= filler_times[1]  # it really waited
    (entry,) = entries
    assert (entry["job"], entry["task"], entry["gpus"]) == ("queued", "w-0", 1)
    assert datetime.fromisoformat(entry["startedAt"]) == start
    assert datetime.fromisoformat(entry["endedAt"]) == end
    seconds = (end - start).total_seconds()
    assert RUN_SECONDS <= seconds <= RUN_SECONDS + 2  # not the queue, not the downtime
    assert abs(entry["gpuHours"] - seconds / 3600) < 1e-9
