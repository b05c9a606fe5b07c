"""What one simulated run measured, and the benchmark table's row for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from aipaas.data.sim_model import JobResult

if TYPE_CHECKING:
    from aipaas.data.sim_run import DataSim

TB = 1e12


@dataclass(frozen=True, slots=True)
class SimResult:
    policy: str
    jobs: tuple[JobResult, ...]
    #: Bytes read from the source (task reads and prefetch loads).
    source_bytes: float
    #: GPU-seconds allocated, and computing at full pace, up to the last arrival.
    allocated_gpu_s: float
    computing_gpu_s: float
    #: GPU-seconds of capacity up to the last arrival.
    capacity_gpu_s: float
    #: Allocated and capacity GPU-seconds over the steps when some job waited in the queue.
    busy_allocated_gpu_s: float
    busy_capacity_gpu_s: float
    makespan_s: float

    @classmethod
    def of(cls, sim: DataSim) -> SimResult:
        capacity = float(sim.state.gpu_count.sum()) * sim.window_end
        return cls(
            sim.policy.name,
            tuple(sorted(sim.results, key=lambda r: r.name)),
            sim.source_bytes,
            sim.allocated_gpu_s,
            sim.computing_gpu_s,
            capacity,
            sim.busy_allocated_gpu_s,
            sim.busy_capacity_gpu_s,
            sim.now,
        )

    @property
    def wait_gpu_hours(self) -> float:
        return sum(job.stall_gpu_s for job in self.jobs) / 3600.0

    @property
    def start_delays_s(self) -> list[float]:
        return [job.start_delay_s for job in self.jobs]

    @property
    def delay_mean_s(self) -> float:
        return float(np.mean(self.start_delays_s)) if self.jobs else 0.0

    @property
    def delay_p99_s(self) -> float:
        return float(np.percentile(self.start_delays_s, 99)) if self.jobs else 0.0

    @property
    def allocation_pct(self) -> float:
        return 100.0 * self.allocated_gpu_s / self.capacity_gpu_s if self.capacity_gpu_s else 0.0

    @property
    def busy_allocation_pct(self) -> float:
        """GPU allocation while jobs wait: how well placement packs (FGD's measure)."""
        if not self.busy_capacity_gpu_s:
            return 0.0
        return 100.0 * self.busy_allocated_gpu_s / self.busy_capacity_gpu_s

    @property
    def computing_pct(self) -> float:
        return 100.0 * self.computing_gpu_s / self.capacity_gpu_s if self.capacity_gpu_s else 0.0

    def row(self) -> list[str]:
        return [
            self.policy,
            f"{self.wait_gpu_hours:,.0f}",
            f"{self.delay_mean_s / 60:,.1f}",
            f"{self.delay_p99_s / 60:,.1f}",
            f"{self.source_bytes / TB:,.1f}",
            f"{self.allocation_pct:.1f}",
            f"{self.busy_allocation_pct:.1f}",
            f"{self.computing_pct:.1f}",
        ]


HEADER = [
    "policy",
    "GPU-hours waiting for data",
    "start delay mean (min)",
    "start delay p99 (min)",
    "read from source (TB)",
    "GPU allocation (%)",
    "GPU allocation while jobs wait (%)",
    "GPUs computing (%)",
]
