"""The placement policies of the FGD paper other than FGD itself, each as a score plugin.

Definitions follow Weng et al., "Beware of Fragmentation" (USENIX ATC'23) and its simulator;
scores are truncated to integers exactly where that simulator truncates, because the resulting
ties (broken by node rank) shape the outcome. MAX_CPU and MAX_GPU are its "max spec" normalisers.
"""

from __future__ import annotations

import numpy as np

from aipaas.scheduler.framework.cluster import ClusterState, IntArray
from aipaas.scheduler.framework.interfaces import (
    MAX_NODE_SCORE,
    NormalizeScorePlugin,
    ScorePlugin,
)
from aipaas.scheduler.framework.registry import PluginContext
from aipaas.scheduler.framework.types import MILLI_PER_GPU, PodRequest

MAX_CPU_MILLI = 128_000.0
MAX_GPU_MILLI = 8_000.0


class RandomScore(ScorePlugin):
    """One feasible node, drawn uniformly, scores 100; every other node 0."""

    name = "Random"
    cacheable = False

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def score(self, state: ClusterState, pod: PodRequest, nodes: IntArray) -> IntArray:
        scores = np.zeros(nodes.size, dtype=np.int64)
        scores[self.rng.integers(nodes.size)] = MAX_NODE_SCORE
        return scores


class DotProductScore(ScorePlugin):
    """Tetris-style alignment: prefer the smallest dot product of free capacity and request."""

    name = "DotProduct"
    cacheable = True

    def score(self, state: ClusterState, pod: PodRequest, nodes: IntArray) -> IntArray:
        node_cpu = state.cpu_free[nodes] / MAX_CPU_MILLI
        node_gpu = state.gpu_free_total[nodes] / MAX_GPU_MILLI
        dot = node_cpu * (pod.cpu_milli / MAX_CPU_MILLI) + node_gpu * (
            pod.gpu_milli_total / MAX_GPU_MILLI
        )
        return ((1.0 - dot / 2) * MAX_NODE_SCORE).astype(np.int64)


class BestFitScore(ScorePlugin, NormalizeScorePlugin):
    """Least CPU and GPU left over after placement (equal weights), min-max normalised."""

    name = "BestFit"
    cacheable = True

    def score(self, state: ClusterState, pod: PodRequest, nodes: IntArray) -> IntArray:
        cpu_left = (state.cpu_free[nodes] - pod.cpu_milli).astype(np.float64)
        gpu_left = (state.gpu_free_total[nodes] - pod.gpu_milli_total).astype(np.float64)
        leftover = cpu_left / MAX_CPU_MILLI * 0.5 + gpu_left / MAX_GPU_MILLI * 0.5
        return ((1.0 - leftover) * MAX_NODE_SCORE).astype(np.int64)

    def normalize(self, scores: IntArray) -> IntArray:
        low, high = scores.min(), scores.max()
        if high == low:
            return np.zeros_like(scores)
        normalized: IntArray = (scores - low) * MAX_NODE_SCORE // (high - low)
        return normalized


class GpuClusteringScore(ScorePlugin):
    """Keep pods of one GPU kind (shared, 1-GPU, 2-GPU, ...) together on the same nodes."""

    name = "GpuClustering"
    cacheable = True

    def score(self, state: ClusterState, pod: PodRequest, nodes: IntArray) -> IntArray:
        if pod.gpu_count == 0:
            return np.zeros(nodes.size, dtype=np.int64)
        tag = "share" if pod.is_shared else f"{pod.gpu_count}-gpu"
        # Go's integer division truncates toward zero (matters only past 8 GPUs a node).
        used_of_max = 25 * (8000 - state.gpu_free_total[nodes])
        base: IntArray = np.sign(used_of_max) * (np.abs(used_of_max) // 8000)
        bonus = np.empty(nodes.size, dtype=np.int64)
        for k, node in enumerate(nodes):
            tags = state.gpu_tags[node]
            if not tags:
                bonus[k] = 25
            elif tag in tags:
                bonus[k] = 75 if len(tags) == 1 else 50
            else:
                bonus[k] = 0
        scores: IntArray = base + bonus
        return scores


class GpuPackingScore(ScorePlugin):
    """Top up partly used GPUs first, then idle GPUs on used nodes, then empty nodes."""

    name = "GpuPacking"
    cacheable = True

    def score(self, state: ClusterState, pod: PodRequest, nodes: IntArray) -> IntArray:
        if pod.gpu_count == 0:
            return np.zeros(nodes.size, dtype=np.int64)
        scores = np.empty(nodes.size, dtype=np.int64)
        for k, node in enumerate(nodes):
            free = state.gpu_free[node, : state.gpu_count[node]]
            idle = int((free == MILLI_PER_GPU).sum())
            if idle == free.size:
                scores[k] = max(MAX_NODE_SCORE // 3 - idle, idle)
                continue
            order = np.argsort(free, kind="stable")
            taken = [int(free[g]) for g in order if free[g] >= pod.gpu_milli][: pod.gpu_count]
            idle_taken = sum(1 for f in taken if f == MILLI_PER_GPU)
            if idle_taken > 0:
                scores[k] = max(50 - idle_taken, 33)
            else:
                used = sum(f * MAX_NODE_SCORE // MILLI_PER_GPU for f in taken)
                scores[k] = max(MAX_NODE_SCORE - used // 10, 50)
        return scores


class CpuOnlyAwayFromIdleGpus(ScorePlugin):
    """A CPU-only pod goes, if it can, to a node whose GPUs are all taken (it strands none).

    Scores 100 on nodes with no free GPU capacity, 0 elsewhere; GPU pods score 0 everywhere,
    so for them the other scores decide alone.
    """

    name = "CpuOnlyAwayFromIdleGpus"
    cacheable = True

    def score(self, state: ClusterState, pod: PodRequest, nodes: IntArray) -> IntArray:
        if pod.gpu_count:
            return np.zeros(nodes.size, dtype=np.int64)
        scores: IntArray = np.where(state.gpu_free_total[nodes] == 0, MAX_NODE_SCORE, 0)
        return scores


def new_random(context: PluginContext) -> RandomScore:
    return RandomScore(context.rng)


def new_dot_product(_: PluginContext) -> DotProductScore:
    return DotProductScore()


def new_best_fit(_: PluginContext) -> BestFitScore:
    return BestFitScore()


def new_gpu_clustering(_: PluginContext) -> GpuClusteringScore:
    return GpuClusteringScore()


def new_gpu_packing(_: PluginContext) -> GpuPackingScore:
    return GpuPackingScore()


def new_cpu_only_away_from_idle_gpus(_: PluginContext) -> CpuOnlyAwayFromIdleGpus:
    return CpuOnlyAwayFromIdleGpus()
