"""DRA in the scheduling cycle: claims filter nodes, and topology scores the devices they get.

The device allocator (``aipaas.devices``) does the work; these plugins ask it, through the
state's ``DeviceLedger``, the questions of the filter and score steps. A pod without claims
passes untouched, so every profile can carry these plugins at no cost.
"""

from __future__ import annotations

import numpy as np

from aipaas.scheduler.framework.cluster import BoolArray, ClusterState, IntArray
from aipaas.scheduler.framework.interfaces import FilterPlugin, ScorePlugin
from aipaas.scheduler.framework.registry import PluginContext
from aipaas.scheduler.framework.types import PodRequest


class DeviceClaims(FilterPlugin):
    """Nodes where every claim of the pod can be allocated together."""

    name = "DeviceClaims"

    def filter(self, state: ClusterState, pod: PodRequest) -> BoolArray:
        if not pod.claims:
            return np.ones(len(state), dtype=np.bool_)
        if state.devices is None:
            return np.zeros(len(state), dtype=np.bool_)
        names = [node.name for node in state.nodes]
        return np.array(state.devices.feasible(pod.claims, names), dtype=np.bool_)

    def explain(self, state: ClusterState, pod: PodRequest) -> dict[str, int]:
        if not pod.claims:
            return {}
        if state.devices is None:
            return {"no devices are published for claims": len(state)}
        return state.devices.explain(pod.claims, [node.name for node in state.nodes])


class DeviceTopology(ScorePlugin):
    """Prefer the node whose devices for the pod's claims sit tightest (NVLink, NUMA, PCIe)."""

    name = "DeviceTopology"
    cacheable = False  # device holdings are not part of the node version

    def score(self, state: ClusterState, pod: PodRequest, nodes: IntArray) -> IntArray:
        if not pod.claims or state.devices is None:
            return np.zeros(nodes.size, dtype=np.int64)
        names = [state.nodes[i].name for i in nodes.tolist()]
        return np.array(state.devices.score(pod.claims, names), dtype=np.int64)


def new_device_claims(_: PluginContext) -> DeviceClaims:
    return DeviceClaims()


def new_device_topology(_: PluginContext) -> DeviceTopology:
    return DeviceTopology()
