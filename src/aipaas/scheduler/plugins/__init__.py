"""Built-in scheduler plugins, listed explicitly: nothing registers itself at import time.

A plugin registered without an argument model takes no arguments (any argument is an error).
"""

from __future__ import annotations

from aipaas.scheduler.framework.registry import Registry
from aipaas.scheduler.plugins import (
    data_affinity,
    device_claims,
    fgd,
    fgd_stranding,
    fit,
    gpu_pickers,
    simple_scores,
)


def default_registry() -> Registry:
    registry = Registry()
    registry.register("NodeResourcesFit", fit.new_node_resources_fit)
    registry.register("GpuFit", fit.new_gpu_fit)
    registry.register("BestFitGpus", gpu_pickers.new_best_fit_gpus)
    registry.register("RandomGpus", gpu_pickers.new_random_gpus)
    registry.register("Random", simple_scores.new_random)
    registry.register("DotProduct", simple_scores.new_dot_product)
    registry.register("BestFit", simple_scores.new_best_fit)
    registry.register("GpuClustering", simple_scores.new_gpu_clustering)
    registry.register("GpuPacking", simple_scores.new_gpu_packing)
    registry.register("CpuOnlyAwayFromIdleGpus", simple_scores.new_cpu_only_away_from_idle_gpus)
    registry.register("FGD", fgd.new_fgd, fgd.FgdArgs)
    registry.register(
        "FGDStranding", fgd_stranding.new_stranding_fgd, fgd_stranding.StrandingFgdArgs
    )
    registry.register("DeviceClaims", device_claims.new_device_claims)
    registry.register("DeviceTopology", device_claims.new_device_topology)
    registry.register(
        data_affinity.NAME, data_affinity.new_data_affinity, data_affinity.DataAffinityArgs
    )
    return registry
