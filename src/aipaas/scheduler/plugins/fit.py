"""Feasibility: CPU and memory fit (NodeResourcesFit) and GPU model and device fit (GpuFit)."""

from __future__ import annotations

import numpy as np

from aipaas.scheduler.framework.cluster import BoolArray, ClusterState
from aipaas.scheduler.framework.gpu_share import fitting_gpus, share_explain
from aipaas.scheduler.framework.interfaces import FilterPlugin
from aipaas.scheduler.framework.registry import PluginContext
from aipaas.scheduler.framework.types import PodRequest


class NodeResourcesFit(FilterPlugin):
    name = "NodeResourcesFit"

    def filter(self, state: ClusterState, pod: PodRequest) -> BoolArray:
        return (state.cpu_free >= pod.cpu_milli) & (state.memory_free >= pod.memory_mib)

    def explain(self, state: ClusterState, pod: PodRequest) -> dict[str, int]:
        return {
            "insufficient cpu": int((state.cpu_free < pod.cpu_milli).sum()),
            "insufficient memory": int((state.memory_free < pod.memory_mib).sum()),
        }


class GpuFit(FilterPlugin):
    """A shared pod needs one GPU with enough free milli; n whole GPUs need n idle GPUs; a
    GPU share (memory and cores) needs n GPUs that each take it (gpu_share.py)."""

    name = "GpuFit"

    def filter(self, state: ClusterState, pod: PodRequest) -> BoolArray:
        if pod.gpu_count == 0:
            return np.ones(len(state), dtype=np.bool_)
        if pod.share is not None:
            fits = np.asarray(fitting_gpus(state, pod).sum(axis=1) >= pod.gpu_count, np.bool_)
        elif pod.is_shared:
            fits = state.gpu_free_max >= pod.gpu_milli
        else:
            fits = state.whole_gpus_free >= pod.gpu_count
        if pod.gpu_models:
            fits &= state.model_mask(pod.gpu_models)
        return fits

    def explain(self, state: ClusterState, pod: PodRequest) -> dict[str, int]:
        if pod.gpu_count == 0:
            return {}
        reasons: dict[str, int] = {}
        model_ok = state.model_mask(pod.gpu_models)
        if pod.gpu_models:
            reasons["GPU model not in " + "|".join(pod.gpu_models)] = int((~model_ok).sum())
        if pod.share is not None:
            return {**reasons, **share_explain(state, pod)}
        if pod.is_shared:
            short = state.gpu_free_max < pod.gpu_milli
            label = f"no GPU with {pod.gpu_milli} milli free"
        else:
            short = state.whole_gpus_free < pod.gpu_count
            label = f"fewer than {pod.gpu_count} idle GPUs"
        reasons[label] = int((short & model_ok).sum())
        return reasons


def new_node_resources_fit(_: PluginContext) -> NodeResourcesFit:
    return NodeResourcesFit()


def new_gpu_fit(_: PluginContext) -> GpuFit:
    return GpuFit()
