"""How busy this machine's GPUs are, from NVML: the local backend's ``GpuUtilization``
capability (backends/gpu_utilization.py), which the controller's idle-GPU alert reads.

GPUs are named by their NVML index, as tasks get them (``CUDA_VISIBLE_DEVICES``). A GPU NVML
cannot read (a MIG-enabled GPU reports no utilisation) is left out: unknown, never "idle".
"""

from __future__ import annotations

import contextlib
from typing import Any

import pynvml


def read_utilization(node: str, nvml: Any = None) -> dict[tuple[str, int], float]:
    """(node, GPU index) -> GPU utilisation in percent over NVML's last sample period."""
    library = nvml if nvml is not None else pynvml
    try:
        library.nvmlInit()
    except library.NVMLError:
        return {}  # no driver or no GPU: nothing can be told
    found: dict[tuple[str, int], float] = {}
    try:
        for index in range(library.nvmlDeviceGetCount()):
            try:
                handle = library.nvmlDeviceGetHandleByIndex(index)
                found[(node, index)] = float(library.nvmlDeviceGetUtilizationRates(handle).gpu)
            except library.NVMLError:
                continue
    except library.NVMLError:
        pass
    finally:
        with contextlib.suppress(library.NVMLError):
            library.nvmlShutdown()
    return found
