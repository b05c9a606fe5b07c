"""GPU fractions on Kubernetes through DRA consumable capacity (KEP-5075): a GPU published
with ``allowMultipleAllocations`` and a ``compute`` capacity (the fake DRA driver's shared
form) is allocated by aipaas to several claims that each ask a share of it; each result
carries ``shareID`` and ``consumedCapacity`` as kube-scheduler's DRA plugin writes them, and
the real API server's validation of the claims' status accepts them."""

from __future__ import annotations

from typing import Any

from aipaas.backends.kubernetes.backend import KubernetesBackend
from aipaas.backends.kubernetes.fake_dra import FakeNode, slice_document
from tests.kube.kube_cluster import Cluster
from tests.kube.kube_objects import user_pod
from tests.kube.kube_scenarios import controller_for
from tests.support.ctl_world import World


def share_claim(name: str, compute: str) -> dict[str, Any]:
    """A claim for one GPU's share: ``compute`` percent of it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "acme"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "count": 1,
                            "capacity": {"requests": {"compute": compute}},
                        },
                    }
                ]
            }
        },
    }


def one_shared_gpu(cluster: Cluster) -> None:
    """gpu-a publishes one shareable GPU; gpu-b publishes none."""
    for node in ("gpu-a", "gpu-b"):
        cluster.remove("ResourceSlice", "", f"{node}-gpu.nvidia.com")
    cluster.put(slice_document(FakeNode("gpu-a", 1, shared=True)))


def submit_share(cluster: Cluster, name: str, compute: str) -> None:
    cluster.put(share_claim(f"{name}-gpu", compute))
    cluster.put(user_pod(name, claim=f"{name}-gpu"))


def test_two_fractional_claims_share_one_device_with_valid_status(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    controller = controller_for(world, backend)
    one_shared_gpu(cluster)
    submit_share(cluster, "half-a", "40")
    submit_share(cluster, "half-b", "40")
    for _ in range(4):
        controller.run_cycle()
    shares = set()
    for name in ("half-a", "half-b"):
        pod = cluster.get("Pod", "acme", name)
        assert pod is not None and pod["spec"].get("nodeName") == "gpu-a"
        claim = cluster.get("ResourceClaim", "acme", f"{name}-gpu")
        assert claim is not None
        # what the server stored is what aipaas wrote: its validation accepted it
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert (result["pool"], result["device"]) == ("gpu-a", "gpu-0")
        assert result["consumedCapacity"] == {"compute": "40", "memory": "1Gi"}
        shares.add(result["shareID"])
        assert claim["status"]["reservedFor"] == [
            {"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}
        ]
    assert len(shares) == 2  # one share each of the one device


def test_a_share_beyond_the_device_capacity_waits(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    controller = controller_for(world, backend)
    one_shared_gpu(cluster)
    submit_share(cluster, "big", "70")
    for _ in range(3):
        controller.run_cycle()
    submit_share(cluster, "too-much", "40")  # 70 + 40 > 100
    for _ in range(3):
        controller.run_cycle()
    assert (cluster.get("Pod", "acme", "big") or {})["spec"].get("nodeName") == "gpu-a"
    assert not (cluster.get("Pod", "acme", "too-much") or {})["spec"].get("nodeName")
    claim = cluster.get("ResourceClaim", "acme", "too-much-gpu") or {}
    assert not (claim.get("status") or {}).get("allocation")
