"""The fake API server answers as a real one does where the backend relies on it: stale
writes conflict, a pod binds once, selectors select, finalizers hold a deletion, and a
request without the kubeconfig's token is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from kube_fake import FakeKube
from kube_objects import user_pod

from aipaas.backends.kubernetes.api import Conflict, KubeApi, make_client
from aipaas.backends.kubernetes.options import KubeOptions


@pytest.fixture
def api(fake: FakeKube, tmp_path: Path) -> KubeApi:
    config = fake.write_kubeconfig(tmp_path / "kubeconfig")
    return KubeApi(make_client(KubeOptions(kubeconfig=str(config))))


def test_a_write_with_a_stale_resource_version_conflicts(api: KubeApi) -> None:
    api.create(user_pod("p"))
    old = api.get("Pod", "p", "acme")
    assert old is not None
    api.patch("Pod", "p", {"metadata": {"labels": {"x": "1"}}}, "acme")
    with pytest.raises(Conflict):
        api.patch(
            "Pod",
            "p",
            {"metadata": {"resourceVersion": old["metadata"]["resourceVersion"], "labels": {}}},
            "acme",
        )


def test_a_pod_binds_once(api: KubeApi) -> None:
    pod = api.create(user_pod("p"))
    binding: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "namespace": "acme", "uid": pod["metadata"]["uid"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-a"},
    }
    api.bind(binding)
    with pytest.raises(Conflict):
        api.bind({**binding, "target": {**binding["target"], "name": "gpu-b"}})
    assert (api.get("Pod", "p", "acme") or {})["spec"]["nodeName"] == "gpu-a"


def test_selectors_select(api: KubeApi) -> None:
    api.create(user_pod("a"))
    other = user_pod("b")
    other["spec"]["schedulerName"] = "default-scheduler"
    other["metadata"]["labels"] = {"app": "web"}
    api.create(other)
    by_field = api.list("Pod", fields={"spec.schedulerName": "aipaas"})
    assert [p["metadata"]["name"] for p in by_field] == ["a"]
    by_label = api.list("Pod", labels={"app": "web"})
    assert [p["metadata"]["name"] for p in by_label] == ["b"]


def test_a_finalizer_holds_a_deletion_until_removed(api: KubeApi) -> None:
    pod = user_pod("held")
    pod["metadata"]["finalizers"] = ["example.com/keep"]
    api.create(pod)
    api.delete("Pod", "held", "acme")
    held = api.get("Pod", "held", "acme")
    assert held is not None and held["metadata"]["deletionTimestamp"]
    api.patch("Pod", "held", {"metadata": {"finalizers": None}}, "acme")
    assert api.get("Pod", "held", "acme") is None


def test_a_request_without_the_token_is_refused(fake: FakeKube) -> None:
    answer = httpx.get(f"{fake.url}/api/v1/nodes")
    assert answer.status_code == 401
