"""The one resource vector: an amount of GPU, CPU, memory and GPU memory, in the platform's
integer units. It is what crosses a package boundary wherever amounts are added, compared or
shared out: the controller counts what tasks hold and what nodes offer in it
(controller/batch_snapshot.py, placement.py), the batch scheduler's quotas, fair shares and
free capacity are in it (scheduler/batch/model.py re-exports it), and ``Amounts.total`` (a
task's request, api/resources.py) turns a request into it.

Units: GPU in milli-GPUs (1000 = one whole GPU), CPU in millicores, memory and GPU memory in MiB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

#: What "no bound" is in a Resources limit (quota): larger than any cluster.
UNBOUNDED: Final = 2**62
RESOURCE_NAMES: Final = ("gpu", "cpu", "memory", "gpuMemory")


class PodShape(Protocol):
    """What a pod asks for, as ``Resources.of_pod`` reads it (the scheduler's PodRequest)."""

    @property
    def gpu_milli_total(self) -> int: ...

    @property
    def cpu_milli(self) -> int: ...

    @property
    def memory_mib(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Resources:
    """An amount per resource (see the module docstring for units)."""

    gpu_milli: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_memory_mib: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.gpu_milli + other.gpu_milli,
            self.cpu_milli + other.cpu_milli,
            self.memory_mib + other.memory_mib,
            self.gpu_memory_mib + other.gpu_memory_mib,
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.gpu_milli - other.gpu_milli,
            self.cpu_milli - other.cpu_milli,
            self.memory_mib - other.memory_mib,
            self.gpu_memory_mib - other.gpu_memory_mib,
        )

    def scaled(self, factor: int) -> Resources:
        return Resources(
            self.gpu_milli * factor,
            self.cpu_milli * factor,
            self.memory_mib * factor,
            self.gpu_memory_mib * factor,
        )

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.gpu_milli, self.cpu_milli, self.memory_mib, self.gpu_memory_mib)

    def fits_within(self, limit: Resources) -> bool:
        """Every resource of ``self`` is at most ``limit``'s."""
        return (
            self.gpu_milli <= limit.gpu_milli
            and self.cpu_milli <= limit.cpu_milli
            and self.memory_mib <= limit.memory_mib
            and self.gpu_memory_mib <= limit.gpu_memory_mib
        )

    def dominant_share(self, capacity: Resources) -> float:
        """DRF: the largest fraction of ``capacity`` that this amount is (0 for an empty
        capacity of a resource)."""
        return max(
            (a / c for a, c in zip(self.as_tuple(), capacity.as_tuple(), strict=True) if c > 0),
            default=0.0,
        )

    @classmethod
    def of_pod(cls, pod: PodShape, gpu_memory_mib: int = 0) -> Resources:
        return cls(pod.gpu_milli_total, pod.cpu_milli, pod.memory_mib, gpu_memory_mib)


NO_LIMIT: Final = Resources(UNBOUNDED, UNBOUNDED, UNBOUNDED, UNBOUNDED)
