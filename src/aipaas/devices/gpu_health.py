"""Each GPU of a node as backends report it: index, UUID, memory and health.

Who calls it: every backend's inventory (local from NVML, Slurm from GRES and node features,
Ray from node labels, Kubernetes from DRA ResourceSlices), so that the node's annotations say
the same thing whoever reports it; the controller's placement reads them back
(``parse_uuids``, and the scheduler's ``parse_indices`` for unhealthy GPUs). Pure.

Two ways say that a GPU is unhealthy, and a backend gives both, since a GPU may be asked for
either way: the node annotation ``aipaas.dev/unhealthy-gpus: 0,3`` (the count and share path of
the scheduler) and, on the GPU's device in the node's ResourceSlice, a taint
``gpu.nvidia.com/unhealthy`` with effect NoSchedule (the DRA allocator, which keeps new
allocations off a tainted device unless a request tolerates it). A DRA device is unhealthy
when it carries a NoSchedule or NoExecute taint (effect None only informs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aipaas.api.devices import Device, ResourceSlice
from aipaas.api.quantity import parse_quantity

__all__ = [
    "GPU_UUIDS_ANNOTATION",
    "UNHEALTHY_GPUS_ANNOTATION",
    "UNHEALTHY_TAINT_KEY",
    "GpuFacts",
    "gpu_annotations",
    "parse_index_list",
    "parse_uuids",
    "slice_gpus",
    "taint_unhealthy",
    "taint_value",
]

GPU_UUIDS_ANNOTATION: Final = "aipaas.dev/gpu-uuids"
"""A node's GPU UUIDs by index, comma separated (only where the backend knows real ones)."""
UNHEALTHY_GPUS_ANNOTATION: Final = "aipaas.dev/unhealthy-gpus"
"""The indices of a node's GPUs that take nothing new: ``0,3``."""
UNHEALTHY_TAINT_KEY: Final = "gpu.nvidia.com/unhealthy"
HARD_EFFECTS: Final = ("NoSchedule", "NoExecute")
_SEPARATORS: Final = re.compile(r"[,._\s]+")


@dataclass(frozen=True)
class GpuFacts:
    """One GPU: ``uuid`` "" when not known, ``memory_mib`` 0 when not known; ``why`` says
    what made it unhealthy."""

    index: int
    uuid: str = ""
    memory_mib: int = 0
    healthy: bool = True
    why: str = ""


def gpu_annotations(gpus: Sequence[GpuFacts]) -> dict[str, str]:
    """The node annotations for ``gpus``: their UUIDs (when every one is known) and the
    unhealthy ones' indices (when there are any)."""
    ordered = sorted(gpus, key=lambda g: g.index)
    out: dict[str, str] = {}
    if ordered and all(g.uuid for g in ordered):
        out[GPU_UUIDS_ANNOTATION] = ",".join(g.uuid for g in ordered)
    bad = [str(g.index) for g in ordered if not g.healthy]
    if bad:
        out[UNHEALTHY_GPUS_ANNOTATION] = ",".join(bad)
    return out


def parse_uuids(text: str) -> tuple[str, ...]:
    """``GPU-a,GPU-b`` -> ("GPU-a", "GPU-b"); blanks are left out."""
    return tuple(p for p in (x.strip() for x in text.split(",")) if p)


def parse_index_list(text: str) -> tuple[int, ...]:
    """GPU indices an operator wrote, separated by commas, dots, underscores or spaces (a Ray
    or Kubernetes label value cannot hold a comma): ``0,3``, ``0.3``, ``0_3``. What is not a
    number is left out."""
    return tuple(sorted({int(p) for p in _SEPARATORS.split(text) if p.isdigit()}))


def taint_unhealthy(published: ResourceSlice, unhealthy: Mapping[int, str]) -> ResourceSlice:
    """``published`` with a NoSchedule taint on each GPU device whose index is in
    ``unhealthy`` (index -> why); MIG devices of such a GPU (``parentIndex``) too."""
    if not unhealthy:
        return published
    devices = []
    for device in published.spec.devices:
        index = _int_attribute(device, "index")
        if index is None:
            index = _int_attribute(device, "parentIndex")
        if index is not None and index in unhealthy and not _tainted(device):
            taint: dict[str, Any] = {
                "key": UNHEALTHY_TAINT_KEY,
                "value": taint_value(unhealthy[index]),
                "effect": "NoSchedule",
            }
            data = device.model_dump(mode="json", by_alias=True, exclude_none=True)
            data["taints"] = [*data.get("taints", []), taint][-4:]
            device = Device.model_validate(data)
        devices.append(device)
    spec = published.spec.model_copy(update={"devices": devices})
    return published.model_copy(update={"spec": spec})


def taint_value(why: str) -> str:
    """``why`` as a taint value (a label value: at most 63 letters, digits, ``-_.``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", why).strip("-_.")[:63].strip("-_.") or "unknown"


def slice_gpus(slices: Iterable[ResourceSlice], node: str, driver: str) -> list[GpuFacts]:
    """The whole GPUs (attribute ``type: gpu``) that ``driver`` publishes for ``node``: index
    (attribute ``index``, else the order they come in), ``uuid``, capacity ``memory``, and
    unhealthy when tainted NoSchedule or NoExecute."""
    found: list[GpuFacts] = []
    for published in slices:
        if published.spec.node_name != node or published.spec.driver != driver:
            continue
        for device in published.spec.devices:
            kind = device.attributes.get("type")
            if kind is None or kind.string != "gpu":
                continue
            index = _int_attribute(device, "index")
            uuid = device.attributes.get("uuid")
            memory = device.capacity.get("memory")
            hard = [t for t in device.taints if t.effect in HARD_EFFECTS]
            found.append(
                GpuFacts(
                    index=len(found) if index is None else index,
                    uuid=(uuid.string or "") if uuid is not None else "",
                    memory_mib=int(parse_quantity(memory.value) // 2**20) if memory else 0,
                    healthy=not hard,
                    why=", ".join(f"{t.key}={t.value or ''}:{t.effect}" for t in hard),
                )
            )
    return sorted(found, key=lambda g: g.index)


def _int_attribute(device: Device, name: str) -> int | None:
    attribute = device.attributes.get(name)
    return attribute.int_ if attribute is not None else None


def _tainted(device: Device) -> bool:
    return any(t.key == UNHEALTHY_TAINT_KEY for t in device.taints)
