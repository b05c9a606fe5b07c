"""``--backend kubernetes`` from a server's settings: the kubeconfig and the tenant mapping
read from the environment, the backend built by the registry and answering."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from aipaas.backends.kubernetes.backend import KubernetesBackend
from aipaas.backends.registry import make_backend
from aipaas.cli.control_runtime import kube_options
from aipaas.settings import Settings, env_overrides
from tests.kube.kube_cluster import Cluster


def test_the_server_settings_build_a_backend_that_reads_the_cluster(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = cluster.aipaas_kubeconfig
    environ = {"AIPAAS_KUBE_CONFIG": str(config), "AIPAAS_KUBE_NAMESPACES": "acme=team-acme"}
    settings = Settings(backend="kubernetes", **env_overrides(environ))
    assert settings.kube_namespaces == {"acme": "team-acme"}
    backend = make_backend("kubernetes", tmp_path / "run", kube=kube_options(settings))
    assert isinstance(backend, KubernetesBackend)
    assert backend.options.namespace("acme") == "team-acme"
    assert {n.name for n in backend.inventory().nodes} == {"gpu-a", "gpu-b"}
    backend.close()


@pytest.mark.parametrize("text", ["acme", "acme=", "=ns", "a=b,c"])
def test_a_bad_namespace_mapping_names_the_pair(text: str) -> None:
    with pytest.raises(ValidationError) as raised:
        Settings(backend="kubernetes", kube_namespaces=text)
    assert "kube_namespaces" in str(raised.value) and "TENANT=NAMESPACE" in str(raised.value)
