"""Extension points of the scheduling framework: one Protocol per question a cycle asks.

Scores are integers on 0..100 (like kube-scheduler's MaxNodeScore); a plugin that truncates
does so on purpose, because ties and their tie-break are part of a policy's behaviour.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from aipaas.scheduler.framework.cluster import BoolArray, ClusterState, IntArray
from aipaas.scheduler.framework.types import MILLI_PER_GPU, PodRequest

MAX_NODE_SCORE = 100


class Plugin(Protocol):
    name: str


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, state: ClusterState, pod: PodRequest) -> BoolArray:
        """Nodes that can take the pod, as a mask over all nodes."""
        ...

    def explain(self, state: ClusterState, pod: PodRequest) -> dict[str, int]:
        """Why nodes were rejected: reason -> number of nodes, for the Unschedulable status."""
        ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    #: True when the score is a function of the node's state and the pod's shape alone, so
    #: the framework may cache it per (pod shape, node) until the node changes.
    cacheable: bool

    def score(self, state: ClusterState, pod: PodRequest, nodes: IntArray) -> IntArray:
        """Scores of ``nodes`` (indices of feasible nodes), higher is better."""
        ...


@runtime_checkable
class NormalizeScorePlugin(Plugin, Protocol):
    def normalize(self, scores: IntArray) -> IntArray:
        """Rescale the scores of all feasible nodes of one pod, after scoring."""
        ...


@runtime_checkable
class GpuPickerPlugin(Plugin, Protocol):
    def pick_gpus(self, state: ClusterState, pod: PodRequest, node: int) -> tuple[int, ...]:
        """The GPUs of ``node`` the pod gets (the reserve step); () for a CPU-only pod."""
        ...


def lowest_free_whole_gpus(state: ClusterState, node: int, count: int) -> tuple[int, ...]:
    """The ``count`` lowest-indexed completely free GPUs of a node."""
    free = np.flatnonzero(state.gpu_free[node, : state.gpu_count[node]] == MILLI_PER_GPU)
    return tuple(int(g) for g in free[:count])
