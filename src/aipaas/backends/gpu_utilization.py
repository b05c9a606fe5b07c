"""An optional backend capability: how busy each GPU it runs tasks on is.

A backend that can tell (NVML on the local machine, DCGM on a cluster) implements
``gpu_utilization``; the controller's alerts (controller/budgets_alerts.py) find it with
``gpu_utilization_of(backend)`` (which looks through the fencing wrapper a server puts around
its backends) and raise "GPUs idle" for tasks whose GPUs stay unused.
Backends that cannot tell do not implement it, and no idle alert is ever guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable


@runtime_checkable
class GpuUtilization(Protocol):
    def gpu_utilization(self) -> Mapping[tuple[str, int], float]:
        """(node name, GPU index) -> utilisation in percent (0-100), for the GPUs it knows."""
        ...


def gpu_utilization_of(backend: object) -> GpuUtilization | None:
    """The backend, or the backend it wraps (backends/fencing.py), when it can tell."""
    while backend is not None:
        if isinstance(backend, GpuUtilization):
            return backend
        backend = getattr(backend, "inner", None)
    return None
