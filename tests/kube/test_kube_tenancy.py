"""Tenants are namespaces: a tenant's tasks run in its namespace (mapped where configured),
others' pods are taken for the tenant their namespace maps to and only into that tenant's
queues, and no namespace can pass for a tenant mapped elsewhere."""

from __future__ import annotations

import time
from pathlib import Path

from aipaas.api.job import Job
from aipaas.controller.kube_import import KubeImport
from tests.kube.kube_backend import make_backend
from tests.kube.kube_cluster import Cluster
from tests.kube.kube_objects import namespace, user_pod
from tests.support.ctl_world import World

BETA = """
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: beta}
spec: {quota: {cpu: 64, memory: 512Gi}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: beta-q, tenant: beta}
"""
ONE = """    - name: main
      command: [sh, -c, "echo hello"]
      resources: {cpu: 1, memory: 1Gi}
"""


def jobs_of(world: World, tenant: str) -> list[Job]:
    return [j for j in world.store.list_objects("Job", tenant) if isinstance(j, Job)]


def test_a_mapped_tenant_runs_in_its_namespace(
    world: World, cluster: Cluster, tmp_path: Path
) -> None:
    cluster.put(namespace("team-acme"))
    backend = make_backend(cluster, tmp_path, namespaces={"acme": "team-acme"})
    world.setup()
    controller = world.controller(backend, inventory_seconds=0)
    world.submit("mapped", ONE)
    controller.run_cycle()
    pods = [
        p for p in cluster.list("Pod") if p["metadata"]["labels"].get("aipaas.dev/job") == "mapped"
    ]
    assert [p["metadata"]["namespace"] for p in pods] == ["team-acme"]
    backend.close()


def test_a_namespace_named_like_a_tenant_mapped_elsewhere_is_not_that_tenant(
    world: World, cluster: Cluster, tmp_path: Path
) -> None:
    cluster.put(namespace("team-acme"))
    backend = make_backend(cluster, tmp_path, namespaces={"acme": "team-acme"})
    world.setup()
    controller = world.controller(
        backend,
        inventory_seconds=0,
        extensions=[KubeImport("research", settle_seconds=0, every_seconds=0)],
    )
    cluster.put(user_pod("impostor"))  # in namespace acme, which is not tenant acme's
    real = user_pod("real")
    real["metadata"]["namespace"] = "team-acme"
    cluster.put(real)
    for _ in range(3):
        controller.run_cycle()
    [job] = jobs_of(world, "acme")
    assert "real" in job.metadata.annotations["aipaas.dev/kube-pods"]
    assert not (cluster.get("Pod", "acme", "impostor") or {})["spec"].get("nodeName")
    backend.close()


def test_a_pod_cannot_name_another_tenants_queue(
    world: World, cluster: Cluster, tmp_path: Path
) -> None:
    backend = make_backend(cluster, tmp_path)
    world.setup()
    world.service.apply_text(BETA)
    controller = world.controller(
        backend,
        inventory_seconds=0,
        extensions=[KubeImport("beta-q", settle_seconds=0, every_seconds=0)],
    )
    cluster.put(namespace("beta"))
    pod = user_pod("sneaky")
    pod["metadata"]["namespace"] = "beta"
    pod["metadata"]["labels"]["kai.scheduler/queue"] = "research"  # acme's queue
    cluster.put(pod)
    for _ in range(3):
        controller.run_cycle()
    assert jobs_of(world, "acme") == [] and jobs_of(world, "beta") == []
    assert not (cluster.get("Pod", "beta", "sneaky") or {})["spec"].get("nodeName")
    backend.close()


def test_others_pods_cannot_use_another_namespaces_claim(
    world: World, cluster: Cluster, tmp_path: Path
) -> None:
    """A pod's claim reference is namespace-local: a pod of beta naming acme's claim names a
    claim of beta, which does not exist, so nothing of acme's is read or allocated for it."""
    backend = make_backend(cluster, tmp_path)
    world.setup()
    world.service.apply_text(BETA)
    controller = world.controller(
        backend,
        inventory_seconds=0,
        extensions=[KubeImport("beta-q", settle_seconds=0, every_seconds=0)],
    )
    cluster.put(namespace("beta"))
    cluster.put(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "acme-gpu", "namespace": "acme"},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
                }
            },
        }
    )
    pod = user_pod("borrower", claim="acme-gpu")
    pod["metadata"]["namespace"] = "beta"
    cluster.put(pod)
    for _ in range(4):
        controller.run_cycle()
    assert world.store.find("ResourceClaim", "beta", "acme-gpu") is None
    claim = cluster.get("ResourceClaim", "acme", "acme-gpu")
    assert claim is not None and not claim.get("status")
    assert not (cluster.get("Pod", "beta", "borrower") or {})["spec"].get("nodeName")
    backend.close()


def test_a_copy_of_a_tasks_pod_elsewhere_does_not_speak_for_it(
    world: World, cluster: Cluster, tmp_path: Path
) -> None:
    """A tenant that learned another's request id labels a pod of its own like aipaas's and
    makes it succeed: the task's state still comes from aipaas's pod (the older one)."""
    backend = make_backend(cluster, tmp_path)
    world.setup()
    controller = world.controller(backend, inventory_seconds=0)
    world.submit("victim", ONE)
    controller.run_cycle()
    [pod] = [
        p for p in cluster.list("Pod") if p["metadata"]["labels"].get("aipaas.dev/job") == "victim"
    ]
    cluster.set_pod_phase("acme", pod["metadata"]["name"], "Running")
    cluster.put(namespace("beta"))
    copy = user_pod("aaa-copy")
    copy["metadata"]["namespace"] = "beta"
    copy["metadata"]["labels"] = dict(pod["metadata"]["labels"])
    copy["metadata"]["annotations"] = dict(pod["metadata"]["annotations"])
    copy["spec"]["schedulerName"] = "default-scheduler"
    copy["spec"]["nodeName"] = "gpu-b"
    time.sleep(1.1)  # made after aipaas's pod (it needed the id, which aipaas's pod carries)
    cluster.put(copy)
    cluster.set_pod_phase("beta", "aaa-copy", "Succeeded", exit_code=0)
    for _ in range(2):
        controller.run_cycle()
    assert world.phase("victim") == "Running"
    backend.close()
