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
from weakref import WeakKeyDictionary

import numpy as np
import numpy.typing as npt
from pydantic import Field

from aipaas.scheduler.framework.cluster import ClusterState, IntArray
from aipaas.scheduler.framework.interfaces import (
    MAX_NODE_SCORE,
    GpuPickerPlugin,
    ScorePlugin,
    lowest_free_whole_gpus,
)
from aipaas.scheduler.framework.registry import PluginArgs, PluginContext
from aipaas.scheduler.framework.types import MILLI_PER_GPU, PodRequest

FloatArray = npt.NDArray[np.float64]

# Category order of the fragmentation sum; "satisfied" (2) is not fragmentation.
LACK_BOTH, LACK_GPU, SATISFIED, LACK_CPU, CPU_ONLY_FITS, CPU_ONLY_LACKS_CPU, NO_ACCESS = range(7)
NO_ROOM = -(2**62)  # below any score, linear ones included
_DEDUPLICATE_FROM = 64


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
    # GPU pods: lack both 0, lack GPU 1, satisfied 2, lack CPU 3; no access 6.
    gpu_category = np.where(accessible, np.where(gpu_ok, 3 - cpu_ok, cpu_ok), NO_ACCESS)
    category = np.where(table.uses_gpu, gpu_category, CPU_ONLY_LACKS_CPU - cpu_ok)
    satisfied = category == SATISFIED
    # A satisfied typical pod still counts the GPU slivers too small for it as fragmentation.
    value = table.probability * np.where(satisfied, sliver_milli, gpu_left)
    category[satisfied] = LACK_GPU
    # bincount adds its weights in input order: per category and variant, over typical pods in
    # order, as the simulator's loop does.
    variants = value.shape[1]
    slots = (category * variants + np.arange(variants)).ravel()
    sums = np.bincount(slots, weights=value.ravel(), minlength=7 * variants).reshape(7, variants)
    total: FloatArray = sums[0] + sums[1] + sums[3] + sums[4] + sums[5] + sums[6]
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
        # Per ClusterState (weakly held, so a new state never sees an old one's entries).
        self._tables: WeakKeyDictionary[ClusterState, TypicalPodTable] = WeakKeyDictionary()
        self._terms: WeakKeyDictionary[ClusterState, _NodeTerms] = WeakKeyDictionary()
        self._choices: WeakKeyDictionary[ClusterState, dict[tuple[object, ...], _GpuChoice]] = (
            WeakKeyDictionary()
        )

    def _fragmentation(
        self,
        table: TypicalPodTable,
        cpu_free: IntArray,
        gpu_left: IntArray,
        fitting_gpus: IntArray,
        sliver_milli: IntArray,
        accessible: npt.NDArray[np.bool_],
        model_ids: IntArray,
    ) -> FloatArray:
        """F of node variants (see ``fragmentation``); a subclass may measure it differently.

        ``model_ids`` (V,) are the variants' GPU models (``ClusterState.model_id``), for a
        subclass that weighs nodes by model; FGD itself reads models only through ``accessible``.
        """
        return fragmentation(table, cpu_free, gpu_left, fitting_gpus, sliver_milli, accessible)

    def _table(self, state: ClusterState) -> TypicalPodTable:
        table = self._tables.get(state)
        if table is None:
            table = self._tables[state] = TypicalPodTable(self.pods, state.models)
            self._terms[state] = _NodeTerms(len(state), table.size)
            self._choices[state] = {}
        return table

    def _node_terms(
        self, state: ClusterState, table: TypicalPodTable, nodes: IntArray
    ) -> tuple[IntArray, IntArray, FloatArray]:
        """Per node and typical pod: GPUs that fit it, milli too small for it; and F(node).

        They depend on the node alone, not on the pod being placed: kept per node version.
        """
        terms = self._terms[state]
        versions = state.version[nodes]
        stale = terms.seen[nodes] != versions
        if stale.any():
            dirty = nodes[stale]
            free = state.gpu_free[dirty][None, :, :]
            fits = free >= table.milli[:, :, None]  # (T, d, G)
            fitting = fits.sum(axis=2)
            sliver = np.where(fits, 0, free).sum(axis=2)
            terms.fitting[dirty] = fitting.T
            terms.sliver[dirty] = sliver.T
            terms.before[dirty] = self._fragmentation(
                table,
                state.cpu_free[dirty],
                state.gpu_free_total[dirty],
                fitting,
                sliver,
                table.accessible[:, state.model_id[dirty]],
                state.model_id[dirty],
            )
            terms.seen[dirty] = versions[stale]
        return terms.fitting[nodes].T, terms.sliver[nodes].T, terms.before[nodes]

    def node_fragmentation(self, state: ClusterState) -> FloatArray:
        """F of every node of ``state`` as it is now (milli-GPU)."""
        nodes = np.arange(len(state), dtype=np.int64)
        return self._node_terms(state, self._table(state), nodes)[2]

    def device_scores(self, state: ClusterState, pod: PodRequest, nodes: IntArray) -> IntArray:
        """Shared pod: score per (node, GPU), NO_ROOM where the GPU lacks room. Else one column."""
        table = self._table(state)
        fitting, sliver, before = self._node_terms(state, table, nodes)  # (T, k), (T, k), (k,)
        cpu = state.cpu_free[nodes]
        left = state.gpu_free_total[nodes]
        models = state.model_id[nodes]
        accessible = table.accessible[:, models]  # (T, k)
        if not pod.is_shared:
            # CPU-only (count 0) or whole GPUs: each taken GPU was idle, so it fitted every pod.
            after = self._fragmentation(
                table,
                cpu - pod.cpu_milli,
                left - pod.gpu_count * MILLI_PER_GPU,
                fitting - pod.gpu_count,
                sliver,
                accessible,
                models,
            )
            return self._score_of(before - after).reshape(-1, 1)
        free = state.gpu_free[nodes]  # (k, G)
        k, gpus = free.shape
        milli = table.milli[:, :, None]  # (T, 1, 1)
        fits_old = free[None, :, :] >= milli  # (T, k, G)
        reduced = free - pod.gpu_milli
        fits_new = reduced[None, :, :] >= milli
        fitting_after = fitting[:, :, None] - fits_old + fits_new
        sliver_after = (
            sliver[:, :, None]
            - np.where(fits_old, 0, free[None, :, :])
            + np.where(fits_new, 0, reduced[None, :, :])
        )
        after = self._fragmentation(
            table,
            np.repeat(cpu - pod.cpu_milli, gpus),
            np.repeat(left - pod.gpu_milli, gpus),
            fitting_after.reshape(table.size, k * gpus),
            sliver_after.reshape(table.size, k * gpus),
            np.repeat(accessible, gpus, axis=1),
            np.repeat(models, gpus),
        ).reshape(k, gpus)
        scores = self._score_of(before[:, None] - after)
        return np.where(free >= pod.gpu_milli, scores, NO_ROOM)

    def _choose_gpus(self, scores: IntArray, free: IntArray) -> IntArray:
        """Per row of device scores, the GPU a shared pod takes."""
        if not self.tight_gpu_ties:
            first_best: IntArray = np.argmax(scores, axis=1)
            return first_best
        # Among equally scored GPUs, the fullest one that fits: fewer, larger holes stay open.
        best = scores == scores.max(axis=1, keepdims=True)
        fullest: IntArray = np.argmin(np.where(best, free, np.iinfo(np.int64).max), axis=1)
        return fullest

    def score(self, state: ClusterState, pod: PodRequest, nodes: IntArray) -> IntArray:
        scored, back = nodes, None
        if nodes.size >= _DEDUPLICATE_FROM:
            # Many nodes share a state (all empty ones of a model, at first): score each once.
            key = np.column_stack(
                (state.cpu_free[nodes], state.model_id[nodes], state.gpu_free[nodes])
            )
            _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
            if first.size < nodes.size // 2:
                scored, back = nodes[first], inverse.ravel()
        devices = self.device_scores(state, pod, scored)
        scores: IntArray = devices.max(axis=1)
        if pod.is_shared:
            # Remember each node's GPU choice, so the reserve step need not score it again.
            choice = self._choices[state].setdefault(pod.shape, _GpuChoice(len(state)))
            chosen = self._choose_gpus(devices, state.gpu_free[scored])
            if back is not None:
                chosen, scored = chosen[back], nodes
            choice.gpu[nodes] = chosen
            choice.seen[nodes] = state.version[nodes]
        return scores if back is None else scores[back]

    def pick_gpus(self, state: ClusterState, pod: PodRequest, node: int) -> tuple[int, ...]:
        if not pod.is_shared:
            return lowest_free_whole_gpus(state, node, pod.gpu_count)
        self._table(state)
        choice = self._choices[state].get(pod.shape)
        if choice is not None and choice.seen[node] == state.version[node]:
            return (int(choice.gpu[node]),)
        at = np.array([node], dtype=np.int64)
        scores = self.device_scores(state, pod, at)
        return (int(self._choose_gpus(scores, state.gpu_free[at])[0]),)


class _NodeTerms:
    def __init__(self, node_count: int, typical_count: int) -> None:
        self.fitting: IntArray = np.zeros((node_count, typical_count), dtype=np.int64)
        self.sliver: IntArray = np.zeros((node_count, typical_count), dtype=np.int64)
        self.before: FloatArray = np.zeros(node_count, dtype=np.float64)
        self.seen: IntArray = np.full(node_count, -1, dtype=np.int64)


class _GpuChoice:
    def __init__(self, node_count: int) -> None:
        self.gpu: IntArray = np.zeros(node_count, dtype=np.int64)
        self.seen: IntArray = np.full(node_count, -1, dtype=np.int64)


class FgdArgs(PluginArgs):
    """FGD's arguments."""

    #: Share of the workload the typical pods cover (the paper keeps the most frequent pods).
    coverage: float = Field(default=0.95, gt=0, le=1)
    #: Score the change of fragmentation in steps of this many milli-GPU (None: the paper's
    #: score); more than a whole GPU would make every placement tie.
    resolution: float | None = Field(default=None, gt=0, le=MILLI_PER_GPU)
    #: Break ties between a node's GPUs by the tightest fit.
    tightGpuTies: bool = False


def new_fgd(context: PluginContext) -> FgdScore:
    args = context.typed(FgdArgs)
    return FgdScore(
        typical_pods(context.workload, args.coverage), args.resolution, args.tightGpuTies
    )
