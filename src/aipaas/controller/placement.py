"""The adapter to the scheduler: the only module of the controller that imports it.

Each cycle builds a fresh ClusterState from the known nodes, takes back the placements of every
task that holds resources (so a restarted controller sees the same allocations), and then
places pending gangs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aipaas.api.resources import Amounts
from aipaas.backends.base import NodeInfo
from aipaas.scheduler.framework.cluster import ClusterState, NodeSpec
from aipaas.scheduler.framework.runtime import Scheduler
from aipaas.scheduler.framework.types import Placement, PodRequest, Unschedulable
from aipaas.tenancy.quota import Usage


@dataclass(frozen=True)
class Slot:
    """Where one task goes: node and GPUs."""

    name: str
    node: str
    node_index: int
    gpus: tuple[int, ...]
    gpu_milli: int


@dataclass(frozen=True)
class Pod:
    name: str
    amounts: Amounts
    gpu_models: tuple[str, ...] = ()


class Placer:
    def __init__(self, nodes: Sequence[NodeInfo], policy: str = "bestfit") -> None:
        self.nodes = sorted(nodes, key=lambda n: n.name)
        self.state = ClusterState(
            [
                NodeSpec(
                    name=n.name,
                    cpu_milli=n.cpu_milli,
                    memory_mib=n.memory_mib,
                    gpu_count=n.gpu_count,
                    gpu_model=n.gpu_model,
                    labels=dict(n.labels),
                )
                for n in self.nodes
            ]
        )
        self.scheduler = Scheduler(self.state, policy)

    def hold(self, pod: Pod, node: str, gpus: tuple[int, ...], gpu_milli: int) -> str | None:
        """Take back a running task's allocation; the reason when it cannot be held."""
        index = self.state.index_of.get(node)
        if index is None:
            return f"node {node} is gone"
        placement = Placement(
            pod=pod.name,
            node=node,
            node_index=index,
            gpus=gpus,
            gpu_milli=gpu_milli,
            cpu_milli=pod.amounts.cpu_milli,
            memory_mib=pod.amounts.memory_mib,
        )
        try:
            self.state.allocate(placement)
        except ValueError as err:
            return str(err)
        return None

    def place(self, pods: Sequence[Pod]) -> list[Slot] | tuple[str, ...]:
        """All pods or none; the scheduler's reasons when they do not fit."""
        result = self.scheduler.schedule_gang([_request(pod) for pod in pods])
        if isinstance(result, Unschedulable):
            return result.reasons
        return [Slot(p.pod, p.node, p.node_index, p.gpus, p.gpu_milli) for p in result]

    def capacity(self) -> Usage:
        """What all nodes offer, in quota units."""
        state = self.state
        return Usage(
            int(state.cpu_capacity.sum()),
            int(state.memory_capacity.sum()),
            state.total_gpu_milli,
        )

    def allocated(self) -> dict[str, tuple[int, int, float]]:
        """Per node: CPU millicores, memory MiB and GPUs (fractions count) in use."""
        state = self.state
        return {
            node.name: (
                int(state.cpu_capacity[i] - state.cpu_free[i]),
                int(state.memory_capacity[i] - state.memory_free[i]),
                (node.gpu_count * 1000 - int(state.gpu_free_total[i])) / 1000,
            )
            for i, node in enumerate(state.nodes)
        }

    @property
    def gpus_total(self) -> float:
        return self.state.total_gpu_milli / 1000

    @property
    def gpus_allocated(self) -> float:
        return self.state.allocated_gpu_milli / 1000


def _request(pod: Pod) -> PodRequest:
    amounts = pod.amounts
    return PodRequest(
        name=pod.name,
        cpu_milli=amounts.cpu_milli,
        memory_mib=amounts.memory_mib,
        gpu_count=amounts.gpu_count,
        gpu_milli=amounts.gpu_milli if amounts.gpu_count else 0,
        gpu_models=pod.gpu_models,
    )
