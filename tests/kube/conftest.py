"""Fixtures of the Kubernetes tests: a real kube-apiserver 1.37 with etcd and kwok, started
once per session by scripts/kube_cluster.sh (kube_cluster.py), cleaned for each test, with two
GPU nodes publishing DRA ResourceSlices as NVIDIA's DRA driver does; the backend talking to it
as the user aipaas (deploy/kubernetes/rbac.yaml's role); the controller world of
tests/support/ctl_world.py. All tests of this folder run on one xdist worker (one cluster)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from aipaas.backends.kubernetes.backend import KubernetesBackend
from tests.kube.kube_backend import make_backend
from tests.kube.kube_cluster import Cluster, start
from tests.support.ctl_world import World, world
from tests.support.kube_seen import bin_dir, seen_file

__all__ = ["World", "backend", "cluster", "world"]
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).parent == HERE:
            item.add_marker(pytest.mark.xdist_group("kube"))


#: where the session's cluster says which version it is (read back at the end of the run by
#: tests/conftest.py, in the main process, while the cluster ran in a worker)
SEEN = seen_file()


def pytest_report_header() -> str:
    apiserver = bin_dir() / "kube-apiserver"
    if not apiserver.exists():
        return f"kubernetes: {apiserver} is not built yet (the first kube test builds it)"
    version = subprocess.run([str(apiserver), "--version"], capture_output=True, text=True)
    return f"kubernetes: {version.stdout.strip()} ({apiserver})"


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    for cluster in start(tmp_path_factory.mktemp("kube-cluster")):
        SEEN.write_text(f"kube-apiserver {cluster.version} (GET /version)")
        yield cluster


@pytest.fixture
def cluster(kube: Cluster) -> Cluster:
    kube.reset()
    return kube


@pytest.fixture
def backend(cluster: Cluster, tmp_path: Path) -> Iterator[KubernetesBackend]:
    made = make_backend(cluster, tmp_path)
    yield made
    made.close()
