"""The Ray backend's pure parts: Ray's node entries as aipaas nodes and slices, and the GPUs a
task asks Ray for. (Against a real cluster: tests/integration/test_ray_backend.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.backends.base import ClaimDevice, LaunchRequest
from aipaas.backends.local.nvml import DRIVER
from aipaas.backends.ray.inventory import (
    NODE_ID_ANNOTATION,
    RESOURCES_ANNOTATION,
    nodes_of,
    slices_of,
)

NODE_ID = "cecf8e6aad511172c3f0455bab26ce442873d3cf26d80ebcb5486e4d"


def entry(**changes: Any) -> dict[str, Any]:
    """A ``ray.nodes()`` entry as Ray 2.60 gives it (trimmed)."""
    base: dict[str, Any] = {
        "NodeID": NODE_ID,
        "Alive": True,
        "NodeManagerAddress": "10.0.0.7",
        "NodeManagerPort": 33139,
        "Resources": {
            "CPU": 16.0,
            "GPU": 8.0,
            "memory": 64 * 2**30,
            "object_store_memory": 2**30,
            "node:10.0.0.7": 1.0,
            "accelerator_type:H100": 1.0,
            "foo": 2.0,
        },
        "Labels": {"ray.io/node-id": NODE_ID, "zone": "a"},
    }
    base.update(changes)
    return base


def test_a_node_with_its_resources_labels_and_custom_resources() -> None:
    (node,) = nodes_of([entry()])
    info = node.info
    assert (info.name, info.backend) == ("ray-cecf8e6aad51", "ray")
    assert (info.cpu_milli, info.memory_mib, info.gpu_count) == (16000, 65536, 8)
    assert (info.gpu_model, info.gpu_memory_mib) == ("H100", 81920)
    assert dict(info.labels) == {"zone": "a", "aipaas.dev/backend": "ray"}
    assert info.annotations[NODE_ID_ANNOTATION] == NODE_ID
    assert info.annotations[RESOURCES_ANNOTATION] == '{"foo": 2.0}'
    assert (node.node_id, node.address, node.raylet_port) == (NODE_ID, "10.0.0.7", 33139)


def test_a_dead_node_is_left_out_and_a_named_one_keeps_its_name() -> None:
    named = entry(NodeID="ab" * 28, Labels={"aipaas.dev/node": "gpu-7"})
    nodes = nodes_of([entry(Alive=False), named])
    assert [n.info.name for n in nodes] == ["gpu-7"]


def test_a_label_aipaas_cannot_carry_is_dropped_and_a_bad_memory_label_is_the_default() -> None:
    labels = {"odd": "has spaces", "aipaas.dev/gpu-memory": "lots"}
    (node,) = nodes_of([entry(Labels=labels)])
    assert "odd" not in node.info.labels
    assert node.info.gpu_memory_mib == 81920
    (small,) = nodes_of([entry(Labels={"aipaas.dev/gpu-memory": "24Gi"})])
    assert small.info.gpu_memory_mib == 24576


def test_gpu_nodes_publish_a_slice_per_gpu_and_cpu_nodes_none() -> None:
    cpu_only = entry(NodeID="cd" * 28, Resources={"CPU": 2.0, "memory": 2**30})
    nodes = nodes_of([entry(), cpu_only])
    assert nodes[1].info.gpu_count == 0
    slices = slices_of(nodes)
    assert {s.spec.node_name for s in slices} == {"ray-cecf8e6aad51"}
    assert sum(len(s.spec.devices) for s in slices) == 8
    assert all(s.spec.driver == DRIVER for s in slices)


def request(gpus: tuple[int, ...], gpu_milli: int, devices: tuple[ClaimDevice, ...] = ()) -> Any:
    return LaunchRequest(
        request_id="u.w-0.0",
        task="w-0",
        job="j",
        tenant="t",
        node="n",
        command=("true",),
        env={},
        working_dir=None,
        gpus=gpus,
        gpu_milli=gpu_milli,
        log_path="/tmp/x.log",
        devices=devices,
    )


@pytest.mark.parametrize(
    ("gpus", "milli", "devices", "wanted"),
    [
        ((), 0, (), 0.0),  # no GPU: Ray gives none (CUDA_VISIBLE_DEVICES "")
        ((0, 1), 1000, (), 2.0),
        ((3,), 500, (), 0.5),  # a shared GPU: Ray's fractional GPU
        ((), 0, (ClaimDevice(DRIVER, "n", "gpu-0"), ClaimDevice(DRIVER, "n", "gpu-1")), 2.0),
        ((), 0, (ClaimDevice("other.example.com", "n", "nic-0"),), 0.0),
    ],
)
def test_the_gpus_asked_of_ray(
    gpus: tuple[int, ...], milli: int, devices: tuple[ClaimDevice, ...], wanted: float
) -> None:
    pytest.importorskip("ray", reason="ray is not installed (the ray extra)")
    from aipaas.backends.ray.driver import gpu_request

    assert gpu_request(request(gpus, milli, devices)) == wanted
