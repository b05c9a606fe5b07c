"""The cluster as aipaas sees it: nodes with their labels as topology, less what other
schedulers' pods request and what claims allocated by others hold; a node that is not Ready or
is cordoned takes nothing new."""

from __future__ import annotations

from typing import Any

from aipaas.backends.kubernetes.backend import KubernetesBackend
from aipaas.devices.inventory import Inventory as DeviceInventory
from aipaas.devices.ledger import DeviceLedger
from tests.kube.kube_cluster import Cluster
from tests.kube.kube_objects import gpu_node, gpu_slice


def other_pod(node: str) -> dict:  # type: ignore[type-arg]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "acme"},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "web",
                    "image": "nginx",
                    "resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}},
                }
            ],
        },
    }


def test_nodes_carry_their_labels_and_what_others_leave(
    cluster: Cluster, backend: KubernetesBackend
) -> None:
    cluster.put(other_pod("gpu-a"))
    found = backend.inventory()
    nodes = {n.name: n for n in found.nodes}
    assert set(nodes) == {"gpu-a", "gpu-b"}
    assert nodes["gpu-a"].labels["topology.aipaas.dev/rack"] == "r1"
    assert nodes["gpu-b"].labels["topology.aipaas.dev/rack"] == "r2"
    assert nodes["gpu-a"].cpu_milli == 64_000 - 1_500
    assert nodes["gpu-a"].memory_mib == 512 * 1024 - 2 * 1024
    assert nodes["gpu-b"].cpu_milli == 64_000
    # GPUs that only a DRA driver publishes count as the node's GPUs
    assert (nodes["gpu-a"].gpu_count, nodes["gpu-a"].gpu_memory_mib) == (4, 80 * 1024)
    assert nodes["gpu-a"].gpu_model == "NVIDIA-H100-80GB-HBM3"  # the node label wins
    assert {n.backend for n in found.nodes} == {"kubernetes"}
    assert found.unknown == frozenset()


def test_devices_allocated_by_another_scheduler_are_held_for_it(
    cluster: Cluster, backend: KubernetesBackend
) -> None:
    """Published whole, with the other scheduler's allocation handed over for the device
    ledger to hold (an adminAccess request may still select the device); the node's GPU count
    leaves it out."""
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "theirs", "namespace": "acme"},
        "spec": {
            "devices": {
                "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
    }
    # labelled like a claim aipaas made: a label proves nothing
    claim["metadata"]["labels"] = {"aipaas.dev/managed": "true"}
    cluster.put(claim)
    cluster.allocate(  # as the kube-scheduler allocates it
        "theirs",
        "acme",
        {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "g",
                            "driver": "gpu.nvidia.com",
                            "pool": "gpu-a",
                            "device": "gpu-1",
                        }
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "theirs", "uid": "u-theirs"}],
        },
    )
    found = backend.inventory()
    slices = {s.spec.node_name: s for s in found.slices}
    assert [d.name for d in slices["gpu-a"].spec.devices] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert {n.name: n.gpu_count for n in found.nodes} == {"gpu-a": 3, "gpu-b": 4}
    assert len(slices["gpu-b"].spec.devices) == 4
    [held] = found.held_elsewhere
    assert (held.metadata.namespace, held.metadata.name) == ("acme", "theirs")
    assert held.status is not None and held.status.allocation is not None
    results = held.status.allocation.devices.results
    assert [(r.pool, r.device) for r in results] == [("gpu-a", "gpu-1")]
    ledger = DeviceLedger.from_claims(
        DeviceInventory(list(found.slices)), {}, list(found.held_elsewhere)
    )
    assert ledger.in_use.devices == {("gpu.nvidia.com", "gpu-a", "gpu-1")}


def test_a_node_not_ready_or_cordoned_is_unknown(
    cluster: Cluster, backend: KubernetesBackend
) -> None:
    cluster.put(gpu_node("gpu-c", ready=False))
    cordoned = gpu_node("gpu-d")
    cordoned["spec"] = {"unschedulable": True}
    cluster.put(cordoned)
    cluster.put(gpu_slice("gpu-c", 2))
    found = backend.inventory()
    assert found.unknown == frozenset({"gpu-c", "gpu-d"})
    assert {n.name for n in found.nodes} == {"gpu-a", "gpu-b", "gpu-c", "gpu-d"}


def test_a_pod_dressed_as_aipaas_s_still_counts(
    cluster: Cluster, backend: KubernetesBackend
) -> None:
    """A pod that carries aipaas's label but is no task of aipaas (no request id, or a copy of
    one) uses its node like any other pod."""
    dressed = other_pod("gpu-b")
    dressed["metadata"]["labels"] = {"aipaas.dev/managed": "true"}
    cluster.put(dressed)
    nodes = {n.name: n for n in backend.inventory().nodes}
    assert nodes["gpu-b"].cpu_milli == 64_000 - 1_500
