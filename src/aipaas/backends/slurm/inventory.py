"""Slurm's nodes (``sinfo --json``) as the backend's nodes.

A node Slurm reports DOWN, DRAIN(ING/ED) or FAIL is left out: for the controller it is gone, so
its tasks are given up (Lost, their Slurm jobs cancelled) and placed again elsewhere. A node that
only stopped answering (NOT_RESPONDING, not yet DOWN) is kept but reported unknown: nothing new
goes there and its tasks are not given up before Slurm decides.

GPUs are the node's ``gpu`` GRES (``gpu:a100:4`` -> 4 GPUs of model A100); their memory is not
in Slurm's node record: a node feature ``gpumem_<quantity>`` says it per node (``gpumem_80Gi``),
else ``gpu_memory`` (an option) stands for it. Per-GPU health is not in Slurm's record either: a
node that is drained or down is left out whole (above), and a feature ``gpu_unhealthy_<index>``
(which a health check sets with ``scontrol update``) marks one GPU that takes nothing new
(devices/gpu_health.py: annotated, and tainted in the node's slice). Slurm knows no GPU UUIDs.
Partitions and features become labels: ``slurm.aipaas.dev/partition-<name>: "true"``,
``slurm.aipaas.dev/feature-<name>: "true"`` (a node selector picks them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aipaas.api.devices import ResourceSlice
from aipaas.api.quantity import parse_quantity
from aipaas.backends.base import NodeInfo
from aipaas.devices.gpu_health import GpuFacts, gpu_annotations, taint_unhealthy
from aipaas.devices.topology_files import GpuShape, gpu_node_slices

BACKEND = "slurm"
LABEL_PREFIX = "slurm.aipaas.dev/"
STATE_ANNOTATION = "slurm.aipaas.dev/state"

#: base states (the first word of Slurm's state) a node takes no work in
DOWN_STATES = frozenset({"down", "fail", "failing", "future", "error", "unknown"})
#: state flags that take a node out of service
DOWN_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED", "FAIL", "POWERED_DOWN", "POWERING_DOWN"})
UNKNOWN_FLAGS = frozenset({"NOT_RESPONDING"})

_LABEL_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")
#: node features an operator sets: each GPU's memory, and one GPU that takes nothing new
GPU_MEMORY_FEATURE = "gpumem_"
UNHEALTHY_FEATURE = "gpu_unhealthy_"


@dataclass(frozen=True)
class SlurmNode:
    """What the backend keeps of a Slurm node besides its NodeInfo."""

    info: NodeInfo
    address: str
    partitions: tuple[str, ...]
    healthy: bool
    responding: bool
    why: str = ""


@dataclass(frozen=True)
class SlurmInventory:
    nodes: tuple[SlurmNode, ...]
    slices: tuple[ResourceSlice, ...] = ()
    by_name: Mapping[str, SlurmNode] = field(default_factory=dict)


def read_nodes(raw: Iterable[Mapping[str, Any]], gpu_memory: str = "80Gi") -> SlurmInventory:
    nodes: list[SlurmNode] = []
    slices: list[ResourceSlice] = []
    for item in raw:
        node = _node(item, gpu_memory)
        nodes.append(node)
        if node.healthy and node.info.gpu_count:
            model = node.info.gpu_model or "GPU"
            memory = f"{node.info.gpu_memory_mib}Mi"
            shape = GpuShape(
                count=node.info.gpu_count, model=model, productName=model, memory=memory
            )
            sick = dict.fromkeys(_unhealthy(node.info.labels), "slurm-node-feature")
            slices.extend(taint_unhealthy(s, sick) for s in gpu_node_slices(node.info.name, shape))
    return SlurmInventory(tuple(nodes), tuple(slices), {n.info.name: n for n in nodes})


def _node(item: Mapping[str, Any], gpu_memory: str) -> SlurmNode:
    name = str(item["name"])
    states = _words(item.get("state"))
    base = states[0].lower() if states else "unknown"
    flags = {f.upper() for f in _words(item.get("state_flags"))} | {s.upper() for s in states[1:]}
    healthy = base not in DOWN_STATES and not (flags & DOWN_FLAGS)
    responding = not (flags & UNKNOWN_FLAGS)
    count, model = gpus_of(str(item.get("gres") or ""))
    partitions = tuple(str(p) for p in item.get("partitions") or ())
    features = [
        f for f in str(item.get("active_features") or item.get("features") or "").split(",")
    ]
    labels = {"aipaas.dev/backend": BACKEND}
    labels.update({_label("partition", p): "true" for p in partitions})
    labels.update({_label("feature", f): "true" for f in features if f})
    memory = _feature_memory(features) or gpu_memory
    state = "+".join([base.upper(), *sorted(flags)])
    reason = str(item.get("reason") or "")
    why = f"{state}{': ' + reason if reason else ''}"
    info = NodeInfo(
        name=name,
        backend=BACKEND,
        cpu_milli=int(item.get("cpus") or 0) * 1000,
        memory_mib=int(item.get("real_memory") or 0),
        gpu_count=count,
        gpu_model=model,
        gpu_memory_mib=int(parse_quantity(memory) // 2**20) if count else 0,
        labels=labels,
        annotations={STATE_ANNOTATION: why[:1024]}
        | gpu_annotations([GpuFacts(i, healthy=False) for i in _unhealthy(labels) if i < count]),
    )
    address = str(item.get("address") or item.get("hostname") or name)
    return SlurmNode(info, address, partitions, healthy, responding, why)


def _feature_memory(features: list[str]) -> str | None:
    """``gpumem_80Gi`` -> "80Gi" (the first such feature that is a quantity)."""
    for feature in features:
        if feature.startswith(GPU_MEMORY_FEATURE):
            text = feature[len(GPU_MEMORY_FEATURE) :]
            try:
                if parse_quantity(text) > 0:
                    return text
            except ValueError:
                continue  # a mistyped feature must not hide the node
    return None


def _unhealthy(labels: Mapping[str, str]) -> list[int]:
    """The GPU indices that ``gpu_unhealthy_<index>`` features name (as labels here)."""
    prefix = _label("feature", UNHEALTHY_FEATURE)
    found = {k[len(prefix) :] for k in labels if k.startswith(prefix)}
    return sorted(int(i) for i in found if i.isdigit())


def gpus_of(gres: str) -> tuple[int, str]:
    """``gpu:a100:4(S:0-1),shard:8`` -> (4, "A100"); several GPU types: the first's model,
    all counted."""
    count, model = 0, ""
    for part in _split_gres(gres):
        fields = re.sub(r"\(.*?\)", "", part).split(":")
        if fields[0] != "gpu" or len(fields) < 2:
            continue
        try:
            number = int(fields[-1])
        except ValueError:
            continue
        count += number
        if len(fields) >= 3 and not model:
            model = fields[1].upper()
    return count, model


def _split_gres(gres: str) -> list[str]:
    """Split on commas outside parentheses (``gpu:a100:4(S:0-1)``)."""
    parts, depth, current = [], 0, ""
    for char in gres:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current:
        parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def _words(value: Any) -> list[str]:
    """Slurm 22.05 says ``"idle"``; later versions a list (``["IDLE", "DRAIN"]``)."""
    if isinstance(value, str):
        return [w for w in re.split(r"[+ ]", value) if w]
    if isinstance(value, list):
        return [str(w) for w in value]
    return []


def _label(kind: str, value: str) -> str:
    return f"{LABEL_PREFIX}{kind}-{_LABEL_CHARS.sub('-', value)[:50]}"
