"""Replaying a trace through the scheduler, one arrival at a time, on a virtual cluster.

The FGD paper's protocol: pods only arrive (nothing finishes), each is tried once, and a pod
that fits nowhere is counted as failed. After every arrival the run samples (GPU milli
requested so far, GPU milli allocated); there is no sample before the first arrival.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aipaas.scheduler.framework.cluster import ClusterState, IntArray, NodeSpec
from aipaas.scheduler.framework.profile import SchedulerProfile
from aipaas.scheduler.framework.runtime import Scheduler
from aipaas.scheduler.framework.types import MILLI_PER_GPU, PodRequest, Unschedulable
from aipaas.scheduler.plugins.fgd import FgdScore, typical_pods
from aipaas.sim.report import allocation_curve

ProgressCallback = Callable[[int, int], None]


@dataclass
class ReplayResult:
    policy: str
    seed: int
    tune: float
    total_gpus: int
    pods_arrived: int
    pods_scheduled: int
    pods_failed: int
    curve: list[dict[str, float]]
    elapsed_s: float
    allocation: dict[str, float] = field(default_factory=dict)
    fragmentation_pct: float = 0.0
    failed_pods: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "seed": self.seed,
            "tune": self.tune,
            "total_gpus": self.total_gpus,
            "pods_arrived": self.pods_arrived,
            "pods_scheduled": self.pods_scheduled,
            "pods_failed": self.pods_failed,
            "curve": self.curve,
            "elapsed_s": round(self.elapsed_s, 3),
            "allocation_ratio": self.allocation,
            "fragmentation_pct": round(self.fragmentation_pct, 2),
            "failed_pods": self.failed_pods,
        }


def cluster_fragmentation_pct(state: ClusterState, workload: Sequence[PodRequest]) -> float:
    """Share of idle GPU capacity that the typical workload cannot use (FGD's measure)."""
    idle = int(state.gpu_free_total.sum())
    if idle == 0:
        return 0.0
    frag = FgdScore(typical_pods(workload)).node_fragmentation(state)
    return float(frag.sum()) / idle * 100


def allocation_ratios(state: ClusterState, used_gpu_milli: int) -> dict[str, float]:
    """The end-of-run allocation block of the paper's simulator, in percent."""
    gpus = max(int(state.gpu_count.sum()), 1)
    real_gpu = np.arange(state.gpu_free.shape[1]) < state.gpu_count[:, None]
    touched_gpus = int(((state.gpu_free < MILLI_PER_GPU) & real_gpu).sum())

    def used_share(free: IntArray, capacity: IntArray) -> float:
        return round(100 * (1 - int(free.sum()) / max(int(capacity.sum()), 1)), 2)

    return {
        "milli_cpu_pct": used_share(state.cpu_free, state.cpu_capacity),
        "memory_pct": used_share(state.memory_free, state.memory_capacity),
        "gpu_pct": round(100 * touched_gpus / gpus, 2),
        "milli_gpu_pct": round(100 * used_gpu_milli / (gpus * MILLI_PER_GPU), 2),
    }


def replay(
    nodes: Sequence[NodeSpec],
    workload: Sequence[PodRequest],
    arrivals: Sequence[PodRequest],
    policy: str | SchedulerProfile,
    *,
    seed: int,
    tune: float,
    tiebreak_rank: Sequence[int] | None = None,
    on_progress: ProgressCallback | None = None,
) -> ReplayResult:
    """Place ``arrivals`` in order; ``workload`` is the original trace (FGD's typical pods)."""
    started = time.perf_counter()
    state = ClusterState(nodes)
    scheduler = Scheduler(state, policy, seed, workload=workload, tiebreak_rank=tiebreak_rank)
    count = len(arrivals)
    arrived = np.zeros(count, dtype=np.int64)
    allocated = np.zeros(count, dtype=np.int64)
    requested = used = 0
    failed: list[str] = []
    step = max(count // 100, 1)
    for i, pod in enumerate(arrivals):
        requested += pod.gpu_milli_total
        if isinstance(scheduler.schedule(pod), Unschedulable):
            failed.append(pod.name)
        else:
            used += pod.gpu_milli_total
        arrived[i] = requested
        allocated[i] = used
        if on_progress is not None and ((i + 1) % step == 0 or i + 1 == count):
            on_progress(i + 1, count)
    total_gpus = int(state.gpu_count.sum())
    curve = allocation_curve(arrived, allocated, total_gpus)
    allocation = allocation_ratios(state, used)
    name = policy if isinstance(policy, str) else policy.metadata.name
    return ReplayResult(
        policy=name,
        seed=seed,
        tune=tune,
        total_gpus=total_gpus,
        pods_arrived=count,
        pods_scheduled=count - len(failed),
        pods_failed=len(failed),
        curve=curve,
        elapsed_s=time.perf_counter() - started,
        allocation=allocation,
        fragmentation_pct=cluster_fragmentation_pct(state, workload),
        failed_pods=failed,
    )
