"""Several backends from one server (`--backend local,slurm`) against a real Slurm cluster: the
server's nodes are this machine's and Slurm's, each labelled with its backend; a job's
``spec.nodeSelector`` sends it to one of them (a Slurm job, or a process here), a job asking
for labels no node has waits and says which, and a job without one goes where the scheduler
chooses."""

from __future__ import annotations

from pathlib import Path

from tests.integration.slurm_cluster import SlurmCluster, slurm_cluster
from tests.support.server_process import SETUP, ServerProcess

__all__ = ["slurm_cluster"]  # the fixture, used by name

BACKEND_LABEL = "aipaas.dev/backend"


def job(name: str, selector: str | None) -> str:
    chosen = f"\n  nodeSelector: {{{BACKEND_LABEL}: {selector}}}" if selector else ""
    return f"""---
apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, tenant: acme}}
spec:
  queue: research{chosen}
  tasks:
    - name: w
      command: [/bin/bash, -c, 'echo "slurm job ${{SLURM_JOB_ID:-none}}"']
      resources: {{cpu: 1, memory: 64Mi}}
"""


def test_one_server_drives_this_machine_and_slurm(
    tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    options = ["--slurm-conf", str(slurm_cluster.conf)]
    server = ServerProcess(tmp_path / "data", backend="local,slurm", extra=options).start()
    try:
        with server.http() as client:
            client.post("/apply", content=SETUP).raise_for_status()
            nodes = client.get("/nodes").json()["items"]
            by_backend: dict[str, list[str]] = {}
            for node in nodes:
                labels = node["metadata"].get("labels") or {}
                by_backend.setdefault(labels[BACKEND_LABEL], []).append(node["metadata"]["name"])
            assert sorted(by_backend["slurm"]) == ["n1", "n2"]
            (here,) = by_backend["local"]
            assert set(by_backend) == {"local", "slurm"}
            for name, selector in (
                ("to-slurm", "slurm"),
                ("to-local", "local"),
                ("nowhere", "ray"),
                ("anywhere", None),
            ):
                client.post("/apply", content=job(name, selector)).raise_for_status()
        ran = {}
        for name in ("to-slurm", "to-local", "anywhere"):
            done = server.wait_phase(name, "Succeeded", timeout=120)
            uid = done["metadata"]["uid"]
            in_slurm = [j for j in slurm_job_names(slurm_cluster) if j.startswith(f"aipaas.{uid}.")]
            (line,) = server.cli("logs", f"job/{name}", "-t", "acme").stdout.splitlines()
            ran[name] = (done["status"]["tasks"][0]["node"], len(in_slurm), line)
        node, submitted, line = ran["to-slurm"]
        assert node in ("n1", "n2") and submitted == 1
        assert line.startswith("w-0 | slurm job ") and line != "w-0 | slurm job none"
        assert ran["to-local"] == (here, 0, "w-0 | slurm job none")
        node, submitted, _ = ran["anywhere"]
        assert (node == here) == (submitted == 0)  # where the scheduler chose, run there
        waiting = server.job("nowhere")
        status = waiting.get("status") or {}
        assert status.get("phase", "Pending") == "Pending"
        # the batch session's words, as kube-scheduler's: no node has the backend's label
        message = status.get("message", "")
        assert "3 node(s) didn't match the pod's node selector" in message, status
    finally:
        server.close()


def slurm_job_names(cluster: SlurmCluster) -> list[str]:
    """The names of aipaas's jobs Slurm knows."""
    return [str(j["name"]) for j in cluster.jobs()]
