"""What this machine offers: CPU cores, memory, and NVIDIA GPUs found through NVML.

Without a GPU (or without the NVIDIA library) the machine is CPU-only; nothing fails.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from dataclasses import dataclass

import pynvml


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


def detect_gpus() -> list[Gpu]:
    """NVIDIA GPUs visible to this process; [] when NVML is absent or finds none."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            if isinstance(name, bytes):
                name = name.decode()
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20
            gpus.append(Gpu(index, short_model(str(name)), int(memory)))
        return gpus
    except pynvml.NVMLError:
        return []
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def short_model(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100': the model names manifests use."""
    match = re.search(r"\b([A-Z]{1,2}\d{1,4}[A-Za-z]?)\b", name.replace("NVIDIA ", ""))
    return match.group(1) if match else name.strip()
