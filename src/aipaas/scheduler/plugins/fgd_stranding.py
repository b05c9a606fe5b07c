"""FGD with a CPU-stranding term and a reserve for contested GPU models: ours, the policy
behind ``fgdx`` (and ``best``).

FGD's fragmentation F(N) asks, for each typical pod alone, whether it fits on node N. It does
not see that a node's CPU may run out long before its GPUs do: a node left with 2 cores and
two idle GPUs counts no fragmentation for a typical pod of 2 cores, yet after one such pod the
other GPU is stranded. Measured on the openb trace at 100% arrived demand, such idle GPUs on
CPU-exhausted nodes were most of what separates FGD from packing every pod that fits.

The workload's GPU pods need, on average, rho milli-CPU per milli-GPU (all their CPU over all
their GPU milli, from the same trace FGD takes its typical pods from). A node with ``cpuFree``
CPU can feed at most ``cpuFree / rho`` milli-GPU of such pods; the rest of its free GPU milli
is stranded:

    S(N) = max(0, gpuFree(N) - cpuFree(N) / rho)

A pod with little CPU per GPU is drawn to CPU-poor nodes (it lowers S there), a CPU-heavy one
to CPU-rich nodes. When many pods are bound to GPU models this backfires: the CPU-poor nodes
(V100, P100) and the CPU-rich ones (T4) are of the scarce models those pods need, so the term
sends unbound pods onto them, and the bound pods later find no room (see
docs/results/openb-fidelity.md). The reserve term counters it: a model's pressure

    P(m) = (share of GPU demand bound to m) / (m's share of GPU capacity)

(a pod naming several models spread over them by capacity), and free GPU milli on a node of
model m is worth r * min(1, P(m)) more than elsewhere (r = ``reserve``), so a pod that can go
anywhere goes to an uncontested model first. The policy is FGD on

    F'(N) = F(N) + w * S(N) - r * min(1, P(model(N))) * gpuFree(N)

(w = ``weight``: 2 by default, 1.5 in fgdx; r = ``reserve``: 0 by default, 2 in fgdx), scored
as FGD scores: floor(100 * sigmoid((F'(N) - F'(N')) / 1000)). For a pod bound to one model
the reserve is the same on every node it may use, so it changes nothing there. Both extra
terms are the same for every GPU of a node, so they do not reorder a node's GPUs for a shared
pod (only the integer truncation of the shifted score can make two GPUs tie that FGD tells
apart, or the reverse). P uses only the workload's mix (the same trace FGD takes its typical
pods from), not its size.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from weakref import WeakKeyDictionary

import numpy as np
import numpy.typing as npt
from pydantic import Field

from aipaas.scheduler.framework.cluster import ClusterState, IntArray
from aipaas.scheduler.framework.registry import PluginArgs, PluginContext
from aipaas.scheduler.framework.types import PodRequest
from aipaas.scheduler.plugins.fgd import (
    FgdScore,
    FloatArray,
    TypicalPod,
    TypicalPodTable,
    fragmentation,
    typical_pods,
)

DEFAULT_WEIGHT = 2.0
#: Far above any useful weight (the stranded term would drown FGD's own): a typo guard.
MAX_WEIGHT = 100.0


def cpu_per_gpu_milli(workload: Sequence[PodRequest]) -> float:
    """rho: milli-CPU per milli-GPU of the workload's GPU pods (0 when it has none)."""
    gpu = sum(p.gpu_milli_total for p in workload)
    if gpu == 0:
        return 0.0
    return sum(p.cpu_milli for p in workload if p.gpu_count) / gpu


def stranded_gpu_milli(cpu_free: IntArray, gpu_free: IntArray, rho: float) -> FloatArray:
    """S: free GPU milli beyond what the free CPU can feed at rho milli-CPU per milli-GPU."""
    if rho <= 0:
        return np.zeros(np.shape(gpu_free), dtype=np.float64)
    stranded: FloatArray = np.maximum(0.0, gpu_free - cpu_free / rho)
    return stranded


def bound_gpu_share(workload: Sequence[PodRequest]) -> dict[tuple[str, ...], float]:
    """Share of the workload's GPU milli asked by pods naming GPU models, per model list."""
    total = sum(p.gpu_milli_total for p in workload)
    demand: Counter[tuple[str, ...]] = Counter()
    for pod in workload:
        if pod.gpu_count and pod.gpu_models:
            demand[pod.gpu_models] += pod.gpu_milli_total
    return {models: milli / total for models, milli in demand.items()}


def model_pressure(state: ClusterState, demand: Mapping[tuple[str, ...], float]) -> FloatArray:
    """Per model id of ``state`` (and a last entry, 0, for nodes without GPUs): the share of
    GPU demand bound to that model over the model's share of GPU capacity.

    Scale-free (it takes total demand to equal capacity, as it does at 100% arrived): only the
    workload's mix is used, as FGD uses it, never its size. A pod naming several models is
    spread over them in proportion to their capacity.
    """
    capacity = np.zeros(len(state.models) + 1, dtype=np.float64)
    np.add.at(capacity, state.model_id, state.gpu_count.astype(np.float64))
    capacity[-1] = 0.0
    total = capacity.sum()
    asked = np.zeros_like(capacity)
    for models, share in demand.items():
        ids = [state.models.index(m) for m in models if m in state.models]
        room = capacity[ids].sum()
        if room > 0:
            asked[ids] += share * total * capacity[ids] / room
    pressure: FloatArray = np.divide(asked, capacity, out=np.zeros_like(asked), where=capacity > 0)
    return pressure


class StrandingFgdScore(FgdScore):
    """FGD on F' (see the module docstring); also the GPU picker."""

    name = "FGDStranding"

    def __init__(
        self,
        pods: Sequence[TypicalPod],
        rho: float,
        weight: float = DEFAULT_WEIGHT,
        bound_share: Mapping[tuple[str, ...], float] | None = None,
        reserve: float = 0.0,
    ) -> None:
        super().__init__(pods)
        self.rho = rho
        self.weight = weight
        self.bound_share = dict(bound_share or {})
        self.reserve = reserve
        # Per state's table: r * min(1, P) per model id (the table is made once per state).
        self._reserve_of: WeakKeyDictionary[TypicalPodTable, FloatArray] = WeakKeyDictionary()

    def _table(self, state: ClusterState) -> TypicalPodTable:
        table = super()._table(state)
        if table not in self._reserve_of:
            pressure = model_pressure(state, self.bound_share)
            self._reserve_of[table] = self.reserve * np.minimum(pressure, 1.0)
        return table

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
        base = fragmentation(table, cpu_free, gpu_left, fitting_gpus, sliver_milli, accessible)
        total: FloatArray = base + self.weight * stranded_gpu_milli(cpu_free, gpu_left, self.rho)
        if self.reserve and self.bound_share:
            total = total - self._reserve_of[table][model_ids] * gpu_left
        return total


class StrandingFgdArgs(PluginArgs):
    """FGDStranding's arguments."""

    #: As FGD's.
    coverage: float = Field(default=0.95, gt=0, le=1)
    #: How much a stranded milli-GPU counts against an ordinary fragment (0: plain FGD).
    weight: float = Field(default=DEFAULT_WEIGHT, ge=0, le=MAX_WEIGHT)
    #: How much more a free milli-GPU of a contested model is worth, at full pressure (0: none).
    reserve: float = Field(default=0.0, ge=0, le=MAX_WEIGHT)


def new_stranding_fgd(context: PluginContext) -> StrandingFgdScore:
    args = context.typed(StrandingFgdArgs)
    return StrandingFgdScore(
        typical_pods(context.workload, args.coverage),
        cpu_per_gpu_milli(context.workload),
        args.weight,
        bound_gpu_share(context.workload),
        args.reserve,
    )
