"""Which GPUs of the chosen node a pod gets (the reserve step).

Whole-GPU pods always take the lowest-indexed idle GPUs; the pickers differ for shared pods.
"""

from __future__ import annotations

import numpy as np

from aipaas.scheduler.framework.cluster import ClusterState
from aipaas.scheduler.framework.interfaces import GpuPickerPlugin, lowest_free_whole_gpus
from aipaas.scheduler.framework.registry import PluginContext
from aipaas.scheduler.framework.types import PodRequest


class BestFitGpus(GpuPickerPlugin):
    """A shared pod goes to the GPU with the least free milli that still fits (lowest index)."""

    name = "BestFitGpus"

    def pick_gpus(self, state: ClusterState, pod: PodRequest, node: int) -> tuple[int, ...]:
        if not pod.is_shared:
            return lowest_free_whole_gpus(state, node, pod.gpu_count)
        free = state.gpu_free[node, : state.gpu_count[node]]
        leftover = np.where(free >= pod.gpu_milli, free, np.iinfo(np.int64).max)
        return (int(np.argmin(leftover)),)


class RandomGpus(GpuPickerPlugin):
    """A shared pod goes to a GPU drawn uniformly among those that fit."""

    name = "RandomGpus"

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def pick_gpus(self, state: ClusterState, pod: PodRequest, node: int) -> tuple[int, ...]:
        if not pod.is_shared:
            return lowest_free_whole_gpus(state, node, pod.gpu_count)
        fitting = np.flatnonzero(state.gpu_free[node, : state.gpu_count[node]] >= pod.gpu_milli)
        return (int(fitting[self.rng.integers(fitting.size)]),)


def new_best_fit_gpus(_: PluginContext) -> BestFitGpus:
    return BestFitGpus()


def new_random_gpus(context: PluginContext) -> RandomGpus:
    return RandomGpus(context.rng)
