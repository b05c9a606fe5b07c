"""Fixtures of the Kubernetes tests: a real kube-apiserver 1.37 with etcd and kwok, started
once per session by scripts/kube_cluster.sh (kube_cluster.py), cleaned for each test, with two
GPU nodes publishing DRA ResourceSlices as NVIDIA's DRA driver does; the backend talking to it
as the user aipaas (deploy/kubernetes/rbac.yaml's role); the controller world of
tests/unit/controller. All tests of this folder run on one xdist worker (one cluster)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "controller"))

from ctl_world import World, world
from kube_backend import make_backend
from kube_cluster import ROOT, Cluster, start

from aipaas.backends.kubernetes.backend import KubernetesBackend

__all__ = ["World", "backend", "cluster", "world"]
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).parent == HERE:
            item.add_marker(pytest.mark.xdist_group("kube"))


def pytest_report_header() -> str:
    bin_dir = subprocess.run(
        ["bash", str(ROOT / "scripts" / "kube_build.sh"), "--print-dir"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    apiserver = Path(bin_dir) / "kube-apiserver"
    if not apiserver.exists():
        return f"kubernetes: {apiserver} is not built yet (the first kube test builds it)"
    version = subprocess.run([str(apiserver), "--version"], capture_output=True, text=True)
    return f"kubernetes: {version.stdout.strip()} ({apiserver})"


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from start(tmp_path_factory.mktemp("kube-cluster"))


@pytest.fixture
def cluster(kube: Cluster) -> Cluster:
    kube.reset()
    return kube


@pytest.fixture
def backend(cluster: Cluster, tmp_path: Path) -> Iterator[KubernetesBackend]:
    made = make_backend(cluster, tmp_path)
    yield made
    made.close()
