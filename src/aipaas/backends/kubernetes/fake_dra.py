"""A stand-in DRA driver for test and trial clusters without GPUs: it creates Nodes (KWOK
nodes when asked, which the kwok controller keeps Ready) and publishes each node's GPUs as a
resource.k8s.io/v1 ResourceSlice, with the names NVIDIA's DRA driver (gpu.nvidia.com) uses:
attributes ``type`` ("gpu"), ``uuid``, ``productName``, ``brand``, ``architecture``,
``index``, ``minor``, ``cudaComputeCapability``, ``driverVersion`` and the capacity
``memory``; and the DeviceClass ``gpu.nvidia.com`` that selects them. A node made ``shared``
publishes its GPUs as shareable devices (DRA consumable capacity, KEP-5075):
``allowMultipleAllocations: true``, capacity ``compute`` (100, in percent of the GPU; a request
that names none takes 0) and ``memory`` (taken in steps of 1Gi, 1Gi when not named), the form
aipaas's own topology files give shared GPUs (devices/topology_files.py), so a claim asks a
fraction as ``capacity.requests.compute: "46"`` and a whole GPU as ``compute: "100"``.
No device exists: the slices say what a real driver would publish, so that a scheduler
(kube-scheduler's DRA plugin or aipaas) allocates them.

Used by tests/kube, benchmarks/kube_side_by_side.py and by hand:

    python -m aipaas.backends.kubernetes.fake_dra --kubeconfig K --nodes 4 --gpus 8 [--kwok]
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

from aipaas.backends.kubernetes.api import Conflict, KubeApi
from aipaas.backends.kubernetes.options import KubeOptions

DRIVER: Final = "gpu.nvidia.com"
KWOK_ANNOTATION: Final = "kwok.x-k8s.io/node"
DEVICE_CLASS: Final[dict[str, Any]] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": DRIVER},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": f'device.driver == "{DRIVER}" && '
                    f'device.attributes["{DRIVER}"].type == "gpu"'
                }
            }
        ]
    },
}


@dataclass(frozen=True)
class FakeNode:
    name: str
    gpus: int
    product: str = "NVIDIA H100 80GB HBM3"
    memory: str = "80Gi"
    architecture: str = "Hopper"
    compute_capability: str = "9.0.0"
    cpu: str = "64"
    node_memory: str = "512Gi"
    labels: dict[str, str] = field(default_factory=dict)
    #: GPUs published as shareable devices (consumable capacity), see the module's docstring
    shared: bool = False
    #: the pods the node takes (the kubelet's maxPods)
    max_pods: int = 110


def node_document(node: FakeNode, *, kwok: bool) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/zone": "z1",
        "nvidia.com/gpu.product": node.product.replace(" ", "-"),
        **node.labels,
    }
    meta: dict[str, Any] = {"name": node.name, "labels": labels}
    if kwok:
        meta["annotations"] = {KWOK_ANNOTATION: "fake"}
        labels["type"] = "kwok"
    resources = {"cpu": node.cpu, "memory": node.node_memory, "pods": str(node.max_pods)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "status": {
            "capacity": resources,
            "allocatable": resources,
            # without a kubelet nothing reports: a node made outside kwok is Ready as made
            "conditions": [] if kwok else [{"type": "Ready", "status": "True"}],
        },
    }


def slice_document(node: FakeNode) -> dict[str, Any]:
    """The node's ResourceSlice, one pool per node, as the NVIDIA driver publishes it."""
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": f"GPU-{node.name}-{i:02d}"},
                "productName": {"string": node.product},
                "brand": {"string": "Nvidia"},
                "architecture": {"string": node.architecture},
                "index": {"int": i},
                "minor": {"int": i},
                "cudaComputeCapability": {"version": node.compute_capability},
                "driverVersion": {"version": "570.124.6"},
            },
            **_capacity(node),
        }
        for i in range(node.gpus)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node.name}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node.name,
            "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _capacity(node: FakeNode) -> dict[str, Any]:
    """A GPU's capacity entries; a shared one also allows multiple allocations."""
    if not node.shared:
        return {"capacity": {"memory": {"value": node.memory}}}
    return {
        "allowMultipleAllocations": True,
        "capacity": {
            "memory": {
                "value": node.memory,
                "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}},
            },
            "compute": {
                "value": "100",
                "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "100"}},
            },
        },
    }


def _create(api: KubeApi, document: dict[str, Any]) -> None:
    with contextlib.suppress(Conflict):  # published before
        api.create(document)


def publish(
    api: KubeApi, nodes: Sequence[FakeNode], *, kwok: bool = False, workers: int = 8
) -> None:
    """The DeviceClass, then each node and its slice (a node without GPUs has none)."""
    _create(api, DEVICE_CLASS)

    def one(node: FakeNode) -> None:
        _create(api, node_document(node, kwok=kwok))
        if node.gpus:
            _create(api, slice_document(node))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, nodes))


def withdraw(api: KubeApi, names: Iterable[str]) -> None:
    """Remove the nodes and their slices."""
    for name in names:
        api.delete("ResourceSlice", f"{name}-{DRIVER}")
        api.delete("Node", name)


def uniform(
    count: int, gpus: int, prefix: str = "gpu-node", *, shared: bool = False
) -> list[FakeNode]:
    return [FakeNode(f"{prefix}-{i:04d}", gpus, shared=shared) for i in range(count)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--prefix", default="gpu-node")
    parser.add_argument("--kwok", action="store_true", help="annotate the nodes for kwok")
    parser.add_argument(
        "--shared", action="store_true", help="shareable GPUs (consumable capacity)"
    )
    args = parser.parse_args(argv)
    api = KubeApi.connect(KubeOptions(kubeconfig=args.kubeconfig))
    nodes = uniform(args.nodes, args.gpus, args.prefix, shared=args.shared)
    publish(api, nodes, kwok=args.kwok)
    print(f"published {args.nodes} nodes with {args.gpus} GPUs each")
    api.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
