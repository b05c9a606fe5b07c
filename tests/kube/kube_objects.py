"""Cluster objects the Kubernetes tests start from, shaped as a cluster has them: Nodes with
allocatable resources and labels, ResourceSlices as NVIDIA's DRA driver publishes them."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.nvidia.com"


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def gpu_node(name: str, *, rack: str = "r1", ready: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": "z1",
                "topology.aipaas.dev/rack": rack,
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            },
        },
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def gpu_slice(node: str, count: int) -> dict[str, Any]:
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "type": {"string": "gpu"},
                "index": {"int": i},
                "productName": {"string": "NVIDIA H100 80GB HBM3"},
                "uuid": {"string": f"GPU-{node}-{i}"},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for i in range(count)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def user_pod(
    name: str, *, group: str | None = None, claim: str | None = None, annotations: bool = True
) -> dict[str, Any]:
    """A pod someone else submits for aipaas to schedule (kubectl, a Helm chart)."""
    meta: dict[str, Any] = {"name": name, "namespace": "acme", "labels": {"app": "trainer"}}
    if group is not None:
        if annotations:
            meta["annotations"] = {"scheduling.k8s.io/group-name": group}
        else:
            meta["labels"]["pod-group-name"] = group
    container: dict[str, Any] = {
        "name": "main",
        "image": "busybox:1.36",
        "command": ["sh", "-c", "echo hi"],
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}},
    }
    spec: dict[str, Any] = {"schedulerName": "aipaas", "containers": [container]}
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        container["resources"]["claims"] = [{"name": "gpu"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
