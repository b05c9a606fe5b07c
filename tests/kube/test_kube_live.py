"""The same paths against a whole cluster: by default the tests' own (kube-apiserver 1.37 with
kwok playing the kubelets of two KWOK GPU nodes published by the fake DRA driver), or a real
cluster when one is given:

    AIPAAS_KUBECONFIG=~/.kube/config .venv/bin/pytest -q tests/kube/test_kube_live.py

Optional with a given cluster: AIPAAS_KUBE_NAMESPACE (default aipaas-live, created and deleted
by the test; the kubeconfig's user needs the RBAC of deploy/kubernetes/rbac.yaml plus
namespaces create/delete), AIPAAS_KUBE_IMAGE (default busybox:1.36), AIPAAS_KUBE_DEVICE_CLASS
(a DeviceClass of the cluster's DRA driver, e.g. gpu.nvidia.com: the gang then asks one device
per task through a claim). On the KWOK cluster no container runs: the pods succeed by kwok's
stage (label kwok-complete) and have no log, so the log is checked only on a given
cluster.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aipaas.backends.kubernetes.api import KubeApi
from aipaas.backends.kubernetes.backend import KubernetesBackend
from aipaas.backends.kubernetes.fake_dra import publish, uniform, withdraw
from aipaas.backends.kubernetes.options import KubeOptions
from aipaas.controller.kube_import import KubeImport
from tests.kube.kube_cluster import Cluster
from tests.kube.kube_objects import user_pod
from tests.support.ctl_world import World, cycle_until

KUBECONFIG = os.environ.get("AIPAAS_KUBECONFIG")
NAMESPACE = os.environ.get("AIPAAS_KUBE_NAMESPACE", "aipaas-live")
IMAGE = os.environ.get("AIPAAS_KUBE_IMAGE", "busybox:1.36")
#: the KWOK cluster's nodes publish gpu.nvidia.com devices (the fake DRA driver)
DEVICE_CLASS = os.environ.get("AIPAAS_KUBE_DEVICE_CLASS", "" if KUBECONFIG else "gpu.nvidia.com")
KWOK_NODES = uniform(2, 4, prefix="kwok-gpu")

DEVICES = """apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: {device_class}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: one-device, namespace: acme}}
spec:
  spec:
    devices:
      requests:
      - name: dev
        exactly: {{deviceClassName: {device_class}}}
"""
pytestmark = [pytest.mark.slow]


@pytest.fixture
def live(tmp_path: Path, cluster: Cluster) -> Iterator[KubernetesBackend]:
    if not KUBECONFIG:  # the tests' cluster: KWOK GPU nodes, aipaas holding its role only
        publish(cluster.admin, KWOK_NODES, kwok=True)
        for node in ("gpu-a", "gpu-b"):  # the kubelet-less nodes of the other tests
            cluster.remove("Node", "", node)
            cluster.admin.delete("ResourceSlice", f"{node}-gpu.nvidia.com")
        cluster.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    options = KubeOptions(
        kubeconfig=os.path.expanduser(KUBECONFIG or str(cluster.aipaas_kubeconfig)),
        namespaces={"acme": NAMESPACE},
        default_image=IMAGE,
        log_seconds=0,
    )
    api = KubeApi.connect(options)
    if KUBECONFIG and api.get("Namespace", NAMESPACE) is None:
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    backend = KubernetesBackend(api, options)
    yield backend
    if KUBECONFIG:
        api.delete("Namespace", NAMESPACE)
    else:  # no namespace controller runs there: empty it, leave it
        for pod in cluster.list("Pod", NAMESPACE):
            cluster.remove("Pod", NAMESPACE, pod["metadata"]["name"])
        withdraw(cluster.admin, [n.name for n in KWOK_NODES])
    backend.close()


def gang_tasks() -> str:
    claims = "        claims: [{name: dev, resourceClaimTemplateName: one-device}]\n"
    return (
        "    - name: worker\n      replicas: 2\n"
        '      command: [sh, -c, "echo rank $RANK of $WORLD_SIZE"]\n'
        "      resources:\n        cpu: 100m\n        memory: 64Mi\n"
        + (claims if DEVICE_CLASS else "")
    )


def test_live_gang_runs_and_is_adopted(world: World, live: KubernetesBackend) -> None:
    world.setup("{gpu: 100, cpu: 64, memory: 512Gi}")
    if DEVICE_CLASS:
        world.service.apply_text(DEVICES.format(device_class=DEVICE_CLASS))
    assert live.inventory().nodes, "the cluster reports no nodes"
    controller = world.controller(live, inventory_seconds=0)
    # on the KWOK cluster the pods carry the label that kwok's stage completes
    labels = "" if KUBECONFIG else ", labels: {kwok-complete: 'true'}"
    world.service.apply_text(
        f"apiVersion: aipaas/v1\nkind: Job\nmetadata: {{name: live, tenant: acme{labels}}}\n"
        f"spec:\n  queue: research\n  minAvailable: 2\n  tasks:\n{gang_tasks()}"
    )
    cycle_until(controller, lambda: world.phase("live") == "Succeeded", timeout=300, pause=1)
    pods = [
        p
        for p in live.api.list("Pod", namespace=NAMESPACE)
        if p["metadata"]["labels"].get("aipaas.dev/job") == "live"
    ]
    assert len(pods) == 2 and all(p["spec"]["nodeName"] for p in pods)
    assert all(p["spec"]["schedulerName"] == "aipaas" for p in pods)
    for pod in pods:
        if KUBECONFIG:  # a KWOK pod runs no container: no log
            log_file = Path(pod["metadata"]["annotations"]["aipaas.dev/log-path"])
            assert "of 2" in log_file.read_text()
        for name in pod["spec"].get("resourceClaims") or []:
            # aipaas made it for the task: released and deleted once the pod ended
            assert live.api.get("ResourceClaim", name["resourceClaimName"], NAMESPACE) is None
    # a new process adopts the pods by label: same answers, no new pod
    again = KubernetesBackend(KubeApi.connect(live.options), live.options)
    ids = [p["metadata"]["annotations"]["aipaas.dev/request-id"] for p in pods]
    assert {s.state.value for s in again.status(ids).values()} == {"Succeeded"}
    again.close()


def test_live_foreign_pods_run_as_one_gang(world: World, live: KubernetesBackend) -> None:
    world.setup("{gpu: 100, cpu: 64, memory: 512Gi}")
    controller = world.controller(live, inventory_seconds=0, extensions=[KubeImport("research")])
    for i in range(2):
        pod = user_pod(f"theirs-{i}", group="theirs")
        pod["metadata"]["namespace"] = NAMESPACE
        if not KUBECONFIG:
            pod["metadata"]["labels"]["kwok-complete"] = "true"
        container = pod["spec"]["containers"][0]
        container["image"], container["resources"] = IMAGE, {"requests": {"cpu": "100m"}}
        live.api.create(pod)

    def bound() -> bool:
        found = [live.api.get("Pod", f"theirs-{i}", NAMESPACE) for i in range(2)]
        return all(p is not None and p["spec"].get("nodeName") for p in found)

    cycle_until(controller, bound, timeout=120, pause=1)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        phases = {
            (live.api.get("Pod", f"theirs-{i}", NAMESPACE) or {}).get("status", {}).get("phase")
            for i in range(2)
        }
        if phases == {"Succeeded"}:
            break
        controller.run_cycle()
        time.sleep(1)
    assert phases == {"Succeeded"}
