"""The backend contract (tests/support/backend_contract.py) run against the Kubernetes
backend, talking to the tests' real kube-apiserver as the user aipaas (kube_backend.py); the
other backends run it in tests/integration/test_backend_conformance.py.

No kubelet runs the pods of gpu-a: the harness plays it, as the kubelet reports a container
(``Cluster.set_pod_phase``): a bound pod runs, then ends with its task's exit code once its
time is up; a deleted pod's container ends by SIGTERM (143) and the pod is then removed. What
is checked is what the backend makes of those reports. Run with the Kubernetes tests (one
cluster per session, conftest.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aipaas.backends.base import Backend, LaunchRequest
from aipaas.backends.kubernetes.manifests import REQUEST_LABEL, request_hash
from tests.kube.kube_backend import make_backend
from tests.kube.kube_cluster import Cluster
from tests.support.backend_contract import (
    Harness,
    Task,
    test_a_new_backend_object_reports_a_task_an_earlier_one_started,
    test_a_second_start_of_one_request_id_runs_it_once,
    test_a_stale_fencing_token_is_refused,
    test_a_stopped_task_is_reported_ended,
    test_a_task_ends_with_its_exit_code,
    test_an_id_never_started_is_unknown,
)

__all__ = [  # the contract's tests, used by name
    "test_a_new_backend_object_reports_a_task_an_earlier_one_started",
    "test_a_second_start_of_one_request_id_runs_it_once",
    "test_a_stale_fencing_token_is_refused",
    "test_a_stopped_task_is_reported_ended",
    "test_a_task_ends_with_its_exit_code",
    "test_an_id_never_started_is_unknown",
]

NAMESPACE = "acme"  # the tenant's namespace
NODE = "gpu-a"


class KubeHarness(Harness):
    name = "kubernetes"

    def __init__(self, cluster: Cluster, tmp: Path) -> None:
        super().__init__()
        self.cluster = cluster
        self.tmp = tmp
        self.tasks: dict[str, Task] = {}  # what each request's container does
        self.running_since: dict[str, float] = {}
        self.pods_seen: dict[str, set[str]] = {}  # request id -> uids of its pods

    def make(self) -> Backend:
        return make_backend(self.cluster, self.tmp)

    def close(self) -> None:
        """Every pod made here goes at once: the cluster is shared with the next modules,
        whose fixtures wait for gpu-a to hold no pod, and no backend is left to read a
        deleted pod's end and drop aipaas's finalizer."""
        super().close()
        for rid in self.tasks:
            for pod in self.pods(rid):
                self.cluster.remove("Pod", NAMESPACE, pod["metadata"]["name"])

    def request(self, rid: str, task: Task, *, fencing_token: int | None = None) -> LaunchRequest:
        self.tasks[rid] = task
        return LaunchRequest(
            request_id=rid,
            task="w-0",
            job=rid.split(".", 1)[0],
            tenant="acme",
            node=NODE,
            command=("sh", "-c", f"sleep {task.seconds:g}; exit {task.exit_code}"),
            env={},
            working_dir=None,
            gpus=(),
            gpu_milli=0,
            log_path=str(self.tmp / "logs" / f"{rid}.log"),
            fencing_token=fencing_token,
            cpu_milli=1000,
            memory_mib=128,
        )

    def pods(self, rid: str) -> list[dict[str, Any]]:
        found = self.cluster.admin.list(
            "Pod", namespace=NAMESPACE, labels={REQUEST_LABEL: request_hash(rid)}
        )
        for pod in found:
            self.pods_seen.setdefault(rid, set()).add(pod["metadata"]["uid"])
        return found

    def starts(self, rid: str) -> int:
        # every pod ever seen for the id (a stopped one is gone once its end was read)
        self.pods(rid)
        return len(self.pods_seen.get(rid, set()))

    def play(self) -> None:
        """The kubelet of gpu-a, one step for each pod of the requests made here."""
        for rid, task in self.tasks.items():
            for pod in self.pods(rid):
                self._kubelet(rid, task, pod)

    def _kubelet(self, rid: str, task: Task, pod: dict[str, Any]) -> None:
        name, meta = pod["metadata"]["name"], pod["metadata"]
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        if not pod["spec"].get("nodeName") or phase in ("Succeeded", "Failed"):
            return
        if meta.get("deletionTimestamp"):  # SIGTERM ended it; then its final delete
            self.cluster.set_pod_phase(NAMESPACE, name, "Failed", exit_code=143)
            self.cluster.admin.delete("Pod", name, NAMESPACE, grace=0)
        elif phase == "Pending":
            self.cluster.set_pod_phase(NAMESPACE, name, "Running")
            self.running_since[rid] = time.monotonic()
        elif time.monotonic() - self.running_since.get(rid, 0.0) >= task.seconds:
            ended = "Succeeded" if task.exit_code == 0 else "Failed"
            self.cluster.set_pod_phase(NAMESPACE, name, ended, exit_code=task.exit_code)


@pytest.fixture
def harness(cluster: Cluster, tmp_path: Path) -> Iterator[Harness]:
    made = KubeHarness(cluster, tmp_path)
    yield made
    made.close()
