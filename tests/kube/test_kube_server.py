"""A real ``aipaas server --backend kubernetes`` process against the real API server: a job
submitted through the API becomes bound pods, its state and logs come back through the API
and the CLI, and pods others create are taken as a job the API lists."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.kube.kube_cluster import Cluster
from tests.kube.kube_objects import user_pod
from tests.support.server_process import ServerProcess

SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
spec: {quota: {gpu: 8, cpu: 64, memory: 512Gi}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
"""
JOB = """apiVersion: aipaas/v1
kind: Job
metadata:
  name: hello
  tenant: acme
  annotations: {kubernetes.aipaas.dev/image: "busybox:1.36"}
spec:
  queue: research
  tasks:
  - name: worker
    replicas: 2
    command: [sh, -c, "echo hello"]
    resources: {cpu: 1, memory: 1Gi, gpu: 1}
"""
EXAMPLES = Path(__file__).parents[2] / "examples" / "dra"
pytestmark = [pytest.mark.slow]


def until(done: Callable[[], bool], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


@pytest.fixture(scope="module")
def server(kube: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module (a server takes seconds to start), as the user aipaas."""
    tmp = tmp_path_factory.mktemp("kube-server")
    kube.reset()
    env = {
        "AIPAAS_KUBE_CONFIG": str(kube.aipaas_kubeconfig),
        "AIPAAS_KUBE_DEFAULT_QUEUE": "research",
        "AIPAAS_KUBE_SETTLE_SECONDS": "0",
    }
    process = ServerProcess(tmp / "data", backend="kubernetes", env=env).start()
    process.cli("apply", "-f", "-", input=SETUP)
    process.cli("apply", "-f", str(EXAMPLES / "nvidia-classes.yaml"))
    yield process
    process.stop()


def ours(cluster: Cluster, job: str) -> list[dict]:  # type: ignore[type-arg]
    return [p for p in cluster.list("Pod") if p["metadata"]["labels"].get("aipaas.dev/job") == job]


def test_a_job_through_the_api_runs_as_bound_pods(cluster: Cluster, server: ServerProcess) -> None:
    server.cli("apply", "-f", "-", input=JOB)
    until(
        lambda: (
            len(ours(cluster, "hello")) == 2
            and all(p["spec"].get("nodeName") for p in ours(cluster, "hello"))
        )
    )
    for pod in ours(cluster, "hello"):
        name = pod["metadata"]["name"]
        assert pod["spec"]["containers"][0]["image"] == "busybox:1.36"
        cluster.logs[("acme", name)] = f"hello from {name}\n"
        cluster.set_pod_phase("acme", name, "Succeeded", exit_code=0)
    server.wait_phase("hello", "Succeeded", timeout=90)
    logs = server.cli("logs", "job/hello").stdout
    assert logs.count("hello from hello-worker-") == 2
    writes = [r for r in cluster.requests() if r.verb not in ("get", "list", "watch")]
    assert writes and [r for r in writes if r.code >= 400] == []


def test_pods_others_create_are_listed_as_a_job(cluster: Cluster, server: ServerProcess) -> None:
    for i in range(2):
        cluster.put(user_pod(f"theirs-{i}", group="theirs"))
    until(
        lambda: all(
            (cluster.get("Pod", "acme", f"theirs-{i}") or {})["spec"].get("nodeName")
            for i in range(2)
        )
    )
    jobs = server.cli_json("get", "jobs", "-l", "aipaas.dev/source=kubernetes")
    items = jobs["items"] if isinstance(jobs, dict) else jobs
    assert len(items) == 1 and items[0]["spec"]["minAvailable"] == 2
