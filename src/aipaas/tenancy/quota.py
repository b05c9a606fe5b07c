"""What a pod holds and what the nodes offer, as the controller counts them for quotas
(controller/batch_snapshot.py, placement.py). The quota check itself is the batch session's
(scheduler/batch/session.py ``quota_problem``), the one quota checker."""

from __future__ import annotations

from dataclasses import dataclass

from aipaas.api.resources import Amounts


@dataclass(frozen=True)
class Usage:
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_milli: int = 0  # whole GPUs count 1000 each

    @classmethod
    def of(cls, amounts: Amounts) -> Usage:
        return cls(amounts.cpu_milli, amounts.memory_mib, amounts.gpu_count * amounts.gpu_milli)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.cpu_milli + other.cpu_milli,
            self.memory_mib + other.memory_mib,
            self.gpu_milli + other.gpu_milli,
        )
