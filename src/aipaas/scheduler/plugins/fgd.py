"""FGD: Fragmentation Gradient Descent (Weng et al., USENIX ATC'23).

A node's fragmentation F(N) is the GPU capacity (milli) that the expected workload cannot use
there, averaged over "typical pods" weighted by their frequency. A pod goes where placing it
increases F the least: score = floor(100 * sigmoid((F(N) - F(N')) / 1000)).

For exactness with the paper's simulator, F is accumulated the way it does it: each typical
pod adds to one of seven categories (lack both, lack GPU, satisfied, lack CPU, CPU-only
satisfied, CPU-only lacking CPU, no access), category totals are summed in that order, and the
sums run over typical pods in order. Floating-point addition is not associative, and the
integer truncation turns a last-bit difference into a different decision.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from aipaas.scheduler.framework.cluster import ClusterState, IntArray
from aipaas.scheduler.framework.interfaces import (
    MAX_NODE_SCORE,
    GpuPickerPlugin,
    ScorePlugin,
    lowest_free_whole_gpus,
)
from aipaas.scheduler.framework.registry import PluginContext
from aipaas.scheduler.framework.types import MILLI_PER_GPU, PodRequest

FloatArray = npt.NDArray[np.float64]

# Category order of the fragmentation sum; "satisfied" (2) is not fragmentation.
LACK_BOTH, LACK_GPU, SATISFIED, LACK_CPU, CPU_ONLY_FITS, CPU_ONLY_LACKS_CPU, NO_ACCESS = range(7)
NO_ROOM = -(2**62)  # below any score, linear ones included
_DEDUPLICATE_FROM = 64
_SUMMED = np.array((LACK_BOTH, LACK_GPU, LACK_CPU, CPU_ONLY_FITS, CPU_ONLY_LACKS_CPU, NO_ACCESS))


@dataclass(frozen=True, slots=True)
class TypicalPod:
    cpu_milli: int
    gpu_milli: int
    gpu_count: int
    gpu_models: tuple[str, ...]
    probability: float


def typical_pods(pods: Sequence[PodRequest], coverage: float = 0.95) -> list[TypicalPod]:
    """The most frequent pod shapes covering ``coverage`` of ``pods``, with renormalised weights.

    Shapes are ordered by count, then by larger CPU, GPU milli, GPU count and model list; shapes
    are taken from the top until their cumulative count reaches the coverage (the shape that
    crosses it is kept).
    """
    if not pods:
        return []
    counts = Counter((p.cpu_milli, p.gpu_milli, p.gpu_count, p.gpu_models) for p in pods)
    ranked = sorted(
        counts.items(),
        key=lambda item: (item[1], item[0][0], item[0][1], item[0][2], "|".join(item[0][3])),
        reverse=True,
    )
    total = float(len(pods))
    wanted = round(coverage * 100) * total / 100.0
    kept: list[tuple[tuple[int, int, int, tuple[str, ...]], float]] = []
    cumulative = 0.0
    for shape, count in ranked:
        if cumulative >= wanted:
            break
        cumulative += count
        kept.append((shape, count / total))
    share = cumulative / total
    return [TypicalPod(s[0], s[1], s[2], s[3], p / share) for s, p in kept]


class TypicalPodTable:
    """Typical pods as columns (shape (T, 1)) for broadcasting against nodes."""

    def __init__(self, pods: Sequence[TypicalPod], state_models: Sequence[str]) -> None:
        self.size = len(pods)
        self.cpu: IntArray = np.array([p.cpu_milli for p in pods], dtype=np.int64).reshape(-1, 1)
        self.milli: IntArray = np.array([p.gpu_milli for p in pods], dtype=np.int64).reshape(-1, 1)
        self.count: IntArray = np.array([p.gpu_count for p in pods], dtype=np.int64).reshape(-1, 1)
        self.probability: FloatArray = np.array(
            [p.probability for p in pods], dtype=np.float64
        ).reshape(-1, 1)
        self.uses_gpu = self.milli > 0
        # accessible[t, model_id]; the extra last column stands for "node without GPUs" (-1).
        self.accessible = np.ones((len(pods), len(state_models) + 1), dtype=np.bool_)
        for t, pod in enumerate(pods):
            if pod.gpu_models:
                self.accessible[t] = [m in pod.gpu_models for m in state_models] + [False]


def fragmentation(
    table: TypicalPodTable,
    cpu_free: IntArray,
    gpu_left: IntArray,
    fitting_gpus: IntArray,
    sliver_milli: IntArray,
    accessible: npt.NDArray[np.bool_],
) -> FloatArray:
    """F for V node variants; per-typical-pod inputs have shape (T, V), the rest (V,)."""
    cpu_ok = cpu_free >= table.cpu
    gpu_ok = fitting_gpus >= table.count
    category = np.where(
        table.uses_gpu,
        np.where(
            accessible,
            np.where(
                gpu_ok, np.where(cpu_ok, SATISFIED, LACK_CPU), np.where(cpu_ok, LACK_GPU, LACK_BOTH)
            ),
            NO_ACCESS,
        ),
        np.where(cpu_ok, CPU_ONLY_FITS, CPU_ONLY_LACKS_CPU),
    )
    satisfied = category == SATISFIED
    # A satisfied typical pod still counts the GPU slivers too small for it as fragmentation.
    value = table.probability * np.where(satisfied, sliver_milli, gpu_left).astype(np.float64)
    category = np.where(satisfied, LACK_GPU, category)
    # Per category, a reduction over the typical-pod axis, which is not the innermost one:
    # NumPy then adds row after row, the same order as the simulator's loop.
    per_category = np.where(category[None] == _SUMMED[:, None, None], value[None], 0.0)
    sums = per_category.sum(axis=1)
    total: FloatArray = sums[0] + sums[1] + sums[2] + sums[3] + sums[4] + sums[5]
    return total


def _paper_score(delta: FloatArray) -> IntArray:
    return (1.0 / (1.0 + np.exp(-(delta / 1000))) * MAX_NODE_SCORE).astype(np.int64)


def _linear_score(resolution: float) -> Callable[[FloatArray], IntArray]:
    """The change of F in steps of ``resolution`` milli-GPU: changes within a step tie."""

    def score(delta: FloatArray) -> IntArray:
        return np.floor(delta / resolution).astype(np.int64)

    return score


class FgdScore(ScorePlugin, GpuPickerPlugin):
    name = "FGD"
    cacheable = True

    def __init__(
        self,
        pods: Sequence[TypicalPod],
        resolution: float | None = None,
        tight_gpu_ties: bool = False,
    ) -> None:
        self.pods = list(pods)
        self.tight_gpu_ties = tight_gpu_ties
        self._score_of = _paper_score if resolution is None else _linear_score(resolution)
        self._tables: dict[int, TypicalPodTable] = {}

    def _table(self, state: ClusterState) -> TypicalPodTable:
        table = self._tables.get(id(state))
        if table is None:
            table = self._tables[id(state)] = TypicalPodTable(self.pods, state.models)
        return table

    def device_scores(self, state: ClusterState, pod: PodRequest, nodes: IntArray) -> IntArray:
        """Shared pod: score per (node, GPU), NO_ROOM where the GPU lacks room. Else one column."""
        table = self._table(state)
        free = state.gpu_free[nodes]  # (k, G)
        cpu = state.cpu_free[nodes]
        left = state.gpu_free_total[nodes]
        milli = table.milli[:, :, None]  # (T, 1, 1)
        fits_old = free[None, :, :] >= milli  # (T, k, G)
        fitting = fits_old.sum(axis=2)  # (T, k)
        sliver = np.where(fits_old, 0, free[None, :, :]).sum(axis=2)
        accessible = table.accessible[:, state.model_id[nodes]]  # (T, k)
        before = fragmentation(table, cpu, left, fitting, sliver, accessible)
        if not pod.is_shared:
            whole = pod.gpu_count if pod.gpu_milli == MILLI_PER_GPU else 0
            after = fragmentation(
                table,
                cpu - pod.cpu_milli,
                left - whole * MILLI_PER_GPU,
                fitting - whole,
                sliver,
                accessible,
            )
            return self._score_of(before - after).reshape(-1, 1)
        k, gpus = free.shape
        reduced = free - pod.gpu_milli
        fits_new = reduced[None, :, :] >= milli
        fitting_after = fitting[:, :, None] - fits_old + fits_new
        sliver_after = (
            sliver[:, :, None]
            - np.where(fits_old, 0, free[None, :, :])
            + np.where(fits_new, 0, reduced[None, :, :])
        )
        after = fragmentation(
            table,
            np.repeat(cpu - pod.cpu_milli, gpus),
            np.repeat(left - pod.gpu_milli, gpus),
            fitting_after.reshape(table.size, k * gpus),
            sliver_after.reshape(table.size, k * gpus),
            np.repeat(accessible, gpus, axis=1),
        ).reshape(k, gpus)
        scores = self._score_of(before[:, None] - after)
        return np.where(free >= pod.gpu_milli, scores, NO_ROOM)

    def score(self, state: ClusterState, pod: PodRequest, nodes: IntArray) -> IntArray:
        if nodes.size >= _DEDUPLICATE_FROM:
            # Many nodes share a state (all empty ones of a model, at first): score each once.
            key = np.column_stack(
                (state.cpu_free[nodes], state.model_id[nodes], state.gpu_free[nodes])
            )
            _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
            if first.size < nodes.size // 2:
                unique_scores: IntArray = self.device_scores(state, pod, nodes[first]).max(axis=1)
                return unique_scores[inverse.ravel()]
        scores: IntArray = self.device_scores(state, pod, nodes).max(axis=1)
        return scores

    def pick_gpus(self, state: ClusterState, pod: PodRequest, node: int) -> tuple[int, ...]:
        if not pod.is_shared:
            return lowest_free_whole_gpus(state, node, pod.gpu_count)
        scores = self.device_scores(state, pod, np.array([node], dtype=np.int64))[0]
        if not self.tight_gpu_ties:
            return (int(np.argmax(scores)),)
        # Among equally scored GPUs, the fullest one that fits: fewer, larger holes stay open.
        free = state.gpu_free[node]
        tied = np.flatnonzero(scores == scores.max())
        return (int(tied[np.argmin(free[tied])]),)


def new_fgd(context: PluginContext) -> FgdScore:
    coverage = float(context.args.get("coverage", 0.95))
    if not 0 < coverage <= 1:
        raise ValueError(f"FGD args.coverage: must be within (0, 1], got {coverage}")
    resolution = context.args.get("resolution")
    if resolution is not None and not (isinstance(resolution, int | float) and resolution > 0):
        raise ValueError(f"FGD args.resolution: must be a number > 0, got {resolution!r}")
    tight = bool(context.args.get("tightGpuTies", False))
    return FgdScore(typical_pods(context.workload, coverage), resolution, tight)
