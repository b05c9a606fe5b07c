"""The backend under test, talking to the fake API server through a kubeconfig file."""

from __future__ import annotations

from pathlib import Path

from kube_fake import FakeKube

from aipaas.backends.kubernetes.api import KubeApi, make_client
from aipaas.backends.kubernetes.backend import KubernetesBackend
from aipaas.backends.kubernetes.options import KubeOptions


def make_backend(fake: FakeKube, tmp_path: Path, **options: object) -> KubernetesBackend:
    config = fake.write_kubeconfig(tmp_path / "kubeconfig")
    kube = KubeOptions(kubeconfig=str(config), log_seconds=0, **options)  # type: ignore[arg-type]
    return KubernetesBackend(KubeApi(make_client(kube)), kube)
