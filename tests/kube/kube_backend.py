"""The backend under test, talking to the tests' real API server as the user aipaas (who holds
only deploy/kubernetes/rbac.yaml's ClusterRole)."""

from __future__ import annotations

from pathlib import Path

from aipaas.backends.kubernetes.api import KubeApi
from aipaas.backends.kubernetes.backend import KubernetesBackend
from aipaas.backends.kubernetes.options import KubeOptions
from tests.kube.kube_cluster import Cluster


def make_backend(cluster: Cluster, tmp_path: Path, **options: object) -> KubernetesBackend:
    kube = KubeOptions(
        **{  # type: ignore[arg-type]
            "kubeconfig": str(cluster.aipaas_kubeconfig),
            "log_seconds": 0,
            # a start is done when start() returns, as the tests read the cluster right after
            "start_workers": 0,
            **options,
        }
    )
    made = KubernetesBackend(KubeApi.connect(kube), kube)
    cluster.watchers.append(made)  # what the test then writes is waited for until it sees it
    return made
