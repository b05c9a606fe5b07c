"""Ray's nodes (``ray.nodes()`` entries) as aipaas nodes: pure, so it is tested without Ray.

A node is named by its ``aipaas.dev/node`` label when it has one (an operator's stable name),
else ``ray-`` and the start of its Ray node id (a node that restarts gets a new id: a new node
to aipaas, as it is to Ray). Ray's labels become the node's labels; the custom resources,
which aipaas does not schedule, are shown in an annotation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aipaas.backends.base import NodeInfo

BACKEND = "ray"
NAME_LABEL = "aipaas.dev/node"
NODE_ID_LABEL = "ray.io/node-id"
ACCELERATOR_PREFIX = "accelerator_type:"
RESOURCES_ANNOTATION = "ray.aipaas.dev/resources"
NODE_ID_ANNOTATION = "ray.aipaas.dev/node-id"
#: Ray's own resources: offered as CPU, memory and GPUs, or internal (object store, node:IP)
BUILTIN = ("CPU", "GPU", "memory", "object_store_memory")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class RayNode:
    """One live Ray node: aipaas's view, plus what the backend needs to pin work there."""

    info: NodeInfo
    node_id: str
    address: str


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
    annotations = {NODE_ID_ANNOTATION: node_id}
    if custom:
        annotations[RESOURCES_ANNOTATION] = json.dumps(custom, sort_keys=True)
    info = NodeInfo(
        name=node_name(entry),
        backend=BACKEND,
        cpu_milli=int(float(resources.get("CPU", 0)) * 1000),
        memory_mib=int(float(resources.get("memory", 0)) // 2**20),
        gpu_count=int(float(resources.get("GPU", 0))),
        gpu_model=models[0] if models else "",
        labels=labels,
        annotations=annotations,
    )
    return RayNode(info, node_id, str(entry.get("NodeManagerAddress", "")))


def _accelerator(key: str) -> bool:
    return key.startswith(ACCELERATOR_PREFIX)
