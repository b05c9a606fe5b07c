"""Fake GPUs for the demo cluster on a machine without an NVIDIA GPU.

Who calls it: the local backend (backend.py), when the server asks for fake GPUs (the ``demo``
backend of `aipaas up`, backends/registry.py) and NVML finds no GPU here. Without them a job
with ``gpu: 1`` could never start on `aipaas up` on a laptop: the simulated nodes take only
jobs that ask for simulation, and this machine would publish no devices.

The fake GPUs are published as NVML would publish real ones (a ResourceSlice of driver
``gpu.nvidia.com``), so the scheduler and the device allocator treat them as any GPU; their
model is ``FAKE`` and their product name says what they are. A task given one runs its command
for real on this machine, with ``CUDA_VISIBLE_DEVICES`` naming the fake indices (there is no
device behind them) and ``AIPAAS_FAKE_GPUS`` set; its log's first line and its status message
say the GPUs were fake, and so does the node's ``aipaas.dev/gpu-discovery`` annotation.
"""

from __future__ import annotations

from typing import Any, Final

from aipaas.api.devices import ResourceSlice
from aipaas.backends.local.nvml import DRIVER

__all__ = ["FAKE_LABEL", "FAKE_MODEL", "fake_slice", "log_line", "status_note"]

FAKE_MODEL: Final = "FAKE"
FAKE_PRODUCT: Final = "aipaas demo GPU (fake, no device)"
#: the label on a node whose GPUs are fake (``"true"``)
FAKE_LABEL: Final = "aipaas.dev/fake-gpus"
FAKE_MEMORY_BYTES: Final = 16 << 30
#: the file in a task's run directory that names its fake GPUs (its status says so)
MARK_FILE: Final = "fake-gpus"


def fake_slice(node: str, count: int) -> ResourceSlice:
    """``count`` fake whole GPUs of ``node``, as nvml.py publishes real ones."""
    devices: list[dict[str, Any]] = [
        {
            "name": f"gpu-{index}",
            "attributes": {
                "type": {"string": "gpu"},
                "index": {"int": index},
                "uuid": {"string": f"GPU-fake-{node[:40]}-{index}"},
                "productName": {"string": FAKE_PRODUCT},
                "model": {"string": FAKE_MODEL},
                "migEnabled": {"bool": False},
            },
            "capacity": {"memory": {"value": str(FAKE_MEMORY_BYTES)}},
        }
        for index in range(count)
    ]
    return ResourceSlice.model_validate(
        {
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
    )


def annotation(count: int, why: str) -> str:
    """The node's gpu-discovery annotation when it offers fake GPUs."""
    return (
        f"{count} fake GPU(s) for the demo ({why}): tasks run here for real, "
        "CUDA_VISIBLE_DEVICES names no device"
    )


def log_line(visible: str) -> str:
    """The first line of the log of a task given fake GPUs."""
    return (
        f"aipaas: this task's GPU(s) {visible} are FAKE (the demo cluster's; this machine has "
        f"no NVIDIA GPU): CUDA_VISIBLE_DEVICES={visible} names no real device\n"
    )


def status_note(visible: str) -> str:
    """What a task's status message adds when its GPUs were fake."""
    return f"on fake GPU(s) {visible}: the demo cluster's, no real device"
