"""FGD with a CPU-stranding term: ours, the policy behind ``fgdx`` (and ``best``).

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

and the policy is FGD on F'(N) = F(N) + w * S(N) (w = ``weight``, 2 by default), scored as FGD
scores: floor(100 * sigmoid((F'(N) - F'(N')) / 1000)). A pod with little CPU per GPU is drawn
to CPU-poor nodes (it lowers S there), a CPU-heavy one to CPU-rich nodes. S is the same for
every GPU of a node, so it does not reorder a node's GPUs for a shared pod (only the integer
truncation of the shifted score can make two GPUs tie that FGD tells apart, or the reverse).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from pydantic import Field

from aipaas.scheduler.framework.cluster import IntArray
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


class StrandingFgdScore(FgdScore):
    """FGD on F + weight * S (see the module docstring); also the GPU picker."""

    name = "FGDStranding"

    def __init__(
        self, pods: Sequence[TypicalPod], rho: float, weight: float = DEFAULT_WEIGHT
    ) -> None:
        super().__init__(pods)
        self.rho = rho
        self.weight = weight

    def _fragmentation(
        self,
        table: TypicalPodTable,
        cpu_free: IntArray,
        gpu_left: IntArray,
        fitting_gpus: IntArray,
        sliver_milli: IntArray,
        accessible: npt.NDArray[np.bool_],
    ) -> FloatArray:
        base = fragmentation(table, cpu_free, gpu_left, fitting_gpus, sliver_milli, accessible)
        total: FloatArray = base + self.weight * stranded_gpu_milli(cpu_free, gpu_left, self.rho)
        return total


class StrandingFgdArgs(PluginArgs):
    """FGDStranding's arguments."""

    #: As FGD's.
    coverage: float = Field(default=0.95, gt=0, le=1)
    #: How much a stranded milli-GPU counts against an ordinary fragment (0: plain FGD).
    weight: float = Field(default=DEFAULT_WEIGHT, ge=0, le=MAX_WEIGHT)


def new_stranding_fgd(context: PluginContext) -> StrandingFgdScore:
    args = context.typed(StrandingFgdArgs)
    return StrandingFgdScore(
        typical_pods(context.workload, args.coverage),
        cpu_per_gpu_milli(context.workload),
        args.weight,
    )
