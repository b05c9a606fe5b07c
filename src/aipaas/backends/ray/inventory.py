"""Ray's nodes (``ray.nodes()`` entries) as aipaas nodes: pure, so it is tested without Ray.

A node is named by its ``aipaas.dev/node`` label when it has one (an operator's stable name),
else ``ray-`` and the start of its Ray node id (a node that restarts gets a new id: a new node
to aipaas, as it is to Ray). Ray's labels become the node's labels; the custom resources,
which aipaas does not schedule, are shown in an annotation.

Ray knows neither a GPU's memory nor its health nor its UUID: a node says its GPUs' memory with
the label ``aipaas.dev/gpu-memory`` (else DEFAULT_GPU_MEMORY), and the GPUs that take nothing
new with ``aipaas.dev/unhealthy-gpus`` (``0.3`` or ``0_3``: a label value holds no comma),
which become the node's annotation and a taint on those devices of its slice
(devices/gpu_health.py). UUIDs are not reported.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aipaas.api.devices import ResourceSlice
from aipaas.api.quantity import parse_quantity
from aipaas.backends.base import NodeInfo
from aipaas.devices.gpu_health import (
    UNHEALTHY_GPUS_ANNOTATION,
    GpuFacts,
    gpu_annotations,
    parse_index_list,
    taint_unhealthy,
)
from aipaas.devices.topology_files import GpuShape, gpu_node_slices

BACKEND = "ray"
NAME_LABEL = "aipaas.dev/node"
NODE_ID_LABEL = "ray.io/node-id"
ACCELERATOR_PREFIX = "accelerator_type:"
RESOURCES_ANNOTATION = "ray.aipaas.dev/resources"
NODE_ID_ANNOTATION = "ray.aipaas.dev/node-id"
#: Ray does not know a GPU's memory: a node may say it with this label, else DEFAULT_GPU_MEMORY
GPU_MEMORY_LABEL = "aipaas.dev/gpu-memory"
DEFAULT_GPU_MEMORY = "80Gi"
#: Ray's own resources: offered as CPU, memory and GPUs, or internal (object store, node:IP)
BUILTIN = ("CPU", "GPU", "memory", "object_store_memory")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class RayNode:
    """One live Ray node: aipaas's view, plus what the backend needs to pin work there."""

    info: NodeInfo
    node_id: str
    address: str
    raylet_port: int = 0


def node_name(entry: Mapping[str, Any]) -> str:
    labels = entry.get("Labels") or {}
    named = str(labels.get(NAME_LABEL, ""))
    return named or f"ray-{str(entry['NodeID'])[:12]}"


def nodes_of(entries: Iterable[Mapping[str, Any]]) -> list[RayNode]:
    """The live nodes, in Ray's order; a dead one (removed, failed) is left out."""
    found: list[RayNode] = []
    for entry in entries:
        if not entry.get("Alive", False):
            continue
        found.append(_node(entry))
    return found


def slices_of(nodes: Iterable[RayNode]) -> list[ResourceSlice]:
    """The GPUs of each node as a DRA slice (as the sim and Slurm backends publish theirs): the
    controller gives whole GPUs as claim devices, and the task gets as many from Ray."""
    slices: list[ResourceSlice] = []
    for node in nodes:
        info = node.info
        if info.gpu_count:
            model = info.gpu_model or "GPU"
            memory = f"{info.gpu_memory_mib}Mi"
            shape = GpuShape(count=info.gpu_count, model=model, productName=model, memory=memory)
            sick = parse_index_list(info.annotations.get(UNHEALTHY_GPUS_ANNOTATION, ""))
            reason = dict.fromkeys(sick, "ray-node-label")
            slices.extend(taint_unhealthy(s, reason) for s in gpu_node_slices(info.name, shape))
    return slices


def _node(entry: Mapping[str, Any]) -> RayNode:
    resources: Mapping[str, float] = entry.get("Resources") or {}
    node_id = str(entry["NodeID"])
    models = sorted(k[len(ACCELERATOR_PREFIX) :] for k in resources if _accelerator(k))
    custom = {
        k: v
        for k, v in sorted(resources.items())
        if k not in BUILTIN and not k.startswith("node:") and not _accelerator(k)
    }
    labels = {
        str(k): str(v)
        for k, v in (entry.get("Labels") or {}).items()
        if k != NODE_ID_LABEL and _LABEL_VALUE.match(str(v))
    }
    labels["aipaas.dev/backend"] = BACKEND
    gpu_memory = labels.get(GPU_MEMORY_LABEL) or DEFAULT_GPU_MEMORY
    annotations = {NODE_ID_ANNOTATION: node_id}
    gpu_count = int(float(resources.get("GPU", 0)))
    sick = parse_index_list(str((entry.get("Labels") or {}).get(UNHEALTHY_GPUS_ANNOTATION, "")))
    annotations |= gpu_annotations([GpuFacts(i, healthy=False) for i in sick if i < gpu_count])
    if custom:
        annotations[RESOURCES_ANNOTATION] = json.dumps(custom, sort_keys=True)
    info = NodeInfo(
        name=node_name(entry),
        backend=BACKEND,
        cpu_milli=int(float(resources.get("CPU", 0)) * 1000),
        memory_mib=int(float(resources.get("memory", 0)) // 2**20),
        gpu_count=gpu_count,
        gpu_model=models[0] if models else "",
        gpu_memory_mib=_mib(gpu_memory),
        labels=labels,
        annotations=annotations,
    )
    address = str(entry.get("NodeManagerAddress", ""))
    return RayNode(info, node_id, address, int(entry.get("NodeManagerPort") or 0))


def _mib(quantity: str) -> int:
    """A label's memory in MiB; one that is not a quantity counts as the default (a label
    an operator mistyped must not hide the node)."""
    try:
        return int(parse_quantity(quantity) // 2**20)
    except ValueError:
        return int(parse_quantity(DEFAULT_GPU_MEMORY) // 2**20)


def _accelerator(key: str) -> bool:
    return key.startswith(ACCELERATOR_PREFIX)
