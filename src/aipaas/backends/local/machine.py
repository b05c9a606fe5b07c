"""What this machine offers: CPU cores, memory, and the GPUs of its published slice
(nvml.py reads NVML; without a GPU the slice is empty and the machine is CPU-only)."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

from aipaas.api.devices import ResourceSlice
from aipaas.api.quantity import parse_quantity


@dataclass(frozen=True)
class Gpu:
    index: int
    model: str
    memory_mib: int


def node_name() -> str:
    """This host's name as a DNS label."""
    name = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().lower()).strip("-")[:63]
    return name or "localhost"


def cpu_milli() -> int:
    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    ) * 1000


def memory_mib() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20)


def gpus_of(published: ResourceSlice) -> list[Gpu]:
    """The whole GPUs of a slice published by nvml.py (MIG partitions are not counted)."""
    gpus: list[Gpu] = []
    for device in published.spec.devices:
        data = device.model_dump(mode="json", by_alias=True, exclude_none=True)
        attributes = data.get("attributes", {})
        if attributes.get("type", {}).get("string") != "gpu":
            continue
        memory = data.get("capacity", {}).get("memory", {}).get("value", "0")
        gpus.append(
            Gpu(
                index=int(attributes.get("index", {}).get("int", len(gpus))),
                model=str(attributes.get("model", {}).get("string", "")),
                memory_mib=int(parse_quantity(memory) // 2**20),
            )
        )
    return sorted(gpus, key=lambda gpu: gpu.index)


def short_model(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100': the model names manifests use."""
    match = re.search(r"\b([A-Z]{1,2}\d{1,4}[A-Za-z]?)\b", name.replace("NVIDIA ", ""))
    return match.group(1) if match else name.strip()
