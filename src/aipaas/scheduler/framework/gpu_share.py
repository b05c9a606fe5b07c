"""GPU shares by memory and cores, fitted per GPU as HAMi fits them.

Who calls it: the GpuFit filter (which nodes can take a share pod), the Scheduler (which node,
by the profile's node policy, and which GPUs, by its GPU policy). Pure, vectorised over the
ClusterState's per-GPU columns.

A GPU takes a share when all hold (in HAMi's order): it exists and is healthy; it is one the
pod names (by UUID or index), if it names any; fewer than its split count of shares use it;
its free memory holds the share's memory (MiB; a percent of that GPU's memory; neither: all of
it); its free compute holds the share's cores (a 100-core share needs the GPU unshared; a
share of 0 cores still needs a GPU not used up: it takes 1 milli). A pod asking ``count`` GPUs
needs that many such GPUs on one node.

Policies (the profile's ``gpuShare``, HAMi's node and GPU scheduler policies): ``binpack``
takes the most used first, ``spread`` the least used; a GPU's use is shares / split + cores
used / 100 + memory used / memory, a node's the mean over its healthy GPUs. Ties: the lower
GPU index, the node listed first.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from aipaas.scheduler.framework.cluster import BoolArray, ClusterState, IntArray
from aipaas.scheduler.framework.types import MILLI_PER_GPU, GpuShare, PodRequest

__all__ = [
    "Policy",
    "fitting_gpus",
    "memory_needed",
    "node_use",
    "pick_share_gpus",
    "share_explain",
    "share_memory",
]

Policy = Literal["binpack", "spread"]
FloatArray = np.ndarray[tuple[int, ...], np.dtype[np.float64]]


def memory_needed(state: ClusterState, pod: PodRequest) -> IntArray:
    """MiB the share takes of each GPU (a matrix like ``state.gpu_memory``)."""
    share = pod.share
    assert share is not None
    if share.memory_mib:
        return np.full(state.gpu_memory.shape, share.memory_mib, dtype=np.int64)
    percent = share.memory_percent or 100
    return state.gpu_memory * percent // 100


def share_memory(state: ClusterState, share: GpuShare, node: int) -> int:
    """MiB a share takes of each GPU of ``node`` (its GPUs are alike)."""
    if share.memory_mib:
        return share.memory_mib
    return int(state.gpu_memory[node, 0]) * (share.memory_percent or 100) // 100


def fitting_gpus(state: ClusterState, pod: PodRequest, rows: IntArray | None = None) -> BoolArray:
    """Per node (``rows``: only those) and GPU: the GPU can take one share of the pod now."""
    share = pod.share
    assert share is not None
    pick = slice(None) if rows is None else rows
    ok = state.gpu_ok[pick].copy()
    if share.indices:
        wanted = np.zeros(ok.shape[1], dtype=np.bool_)
        wanted[[g for g in share.indices if g < ok.shape[1]]] = True
        ok &= wanted
    if share.uuids:
        names = [state.nodes[int(i)].gpu_uuids for i in np.arange(len(state))[pick]]
        named = np.zeros(ok.shape, dtype=np.bool_)
        for row, uuids in enumerate(names):
            for g, uuid in enumerate(uuids[: ok.shape[1]]):
                named[row, g] = uuid in share.uuids
        ok &= named
    ok &= state.gpu_shares[pick] < state.gpu_split[pick, None]
    free_memory = state.gpu_memory[pick] - state.gpu_memory_used[pick]
    ok &= free_memory >= memory_needed(state, pod)[pick]
    ok &= state.gpu_free[pick] >= pod.gpu_milli
    return ok


def gpu_use(state: ClusterState, rows: IntArray | slice) -> FloatArray:
    """How used each GPU is: shares / split + cores used / 100 + memory used / memory."""
    split = np.maximum(state.gpu_split[rows], 1)[:, None]
    cores = (MILLI_PER_GPU - state.gpu_free[rows]) / MILLI_PER_GPU
    memory = state.gpu_memory[rows]
    used = np.divide(
        state.gpu_memory_used[rows],
        memory,
        out=np.zeros(memory.shape, dtype=np.float64),
        where=memory > 0,
    )
    result: FloatArray = state.gpu_shares[rows] / split + cores + used
    return result


def node_use(state: ClusterState, nodes: IntArray) -> FloatArray:
    """The mean use of each node's healthy GPUs."""
    use = gpu_use(state, nodes)
    ok = state.gpu_ok[nodes]
    counts = np.maximum(ok.sum(axis=1), 1)
    result: FloatArray = np.where(ok, use, 0.0).sum(axis=1) / counts
    return result


def pick_share_gpus(
    state: ClusterState, pod: PodRequest, node: int, policy: Policy
) -> tuple[int, ...]:
    """The ``gpu_count`` GPUs of ``node`` the share goes to, by the GPU policy."""
    rows = np.array([node], dtype=np.int64)
    fits = fitting_gpus(state, pod, rows)[0]
    candidates = np.flatnonzero(fits)
    use = gpu_use(state, rows)[0][candidates]
    order = np.lexsort((candidates, use if policy == "spread" else -use))
    return tuple(int(g) for g in sorted(candidates[order][: pod.gpu_count]))


def share_explain(state: ClusterState, pod: PodRequest) -> dict[str, int]:
    """Nodes refused, by the first reason their GPUs fall short (HAMi's order)."""
    fits = fitting_gpus(state, pod)
    short = fits.sum(axis=1) < pod.gpu_count
    if not short.any():
        return {}
    memory = state.gpu_memory - state.gpu_memory_used
    count = pod.gpu_count
    healthy = state.gpu_ok.sum(axis=1) >= count
    has_memory = ((memory >= memory_needed(state, pod)) & state.gpu_ok).sum(axis=1) >= count
    has_cores = ((state.gpu_free >= pod.gpu_milli) & state.gpu_ok).sum(axis=1) >= count
    # Each node under the first check it fails, in HAMi's order.
    checks = [
        (f"fewer than {count} healthy GPUs", short & ~healthy),
        (f"fewer than {count} GPUs with the memory asked free", short & healthy & ~has_memory),
        (
            f"fewer than {count} GPUs with the cores asked free",
            short & healthy & has_memory & ~has_cores,
        ),
        (
            f"fewer than {count} GPUs that take the share",
            short & healthy & has_memory & has_cores,
        ),
    ]
    return {reason: int(mask.sum()) for reason, mask in checks if mask.any()}
