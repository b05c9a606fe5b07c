"""The placement engine the actions use: the framework's Scheduler over a ClusterState.

The live controller gives the session the same kind of engine, built from its nodes, device
ledger and profile (controller/batch_cycle.py); ``aipaas simulate`` builds one from the
scenario's nodes. Everything goes through ``place``, ``release`` and ``hold``, so a Statement
can undo what it did. With a device ledger, releasing a placement gives back the devices of its
pod's DRA claims as well (an eviction's what-if frees them), and holding it again takes those
very devices back (``held_again``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from aipaas.devices.allocator import NodeAllocation
from aipaas.scheduler.batch.model import Node, Resources
from aipaas.scheduler.framework.cluster import BoolArray, ClusterState, IntArray, NodeSpec
from aipaas.scheduler.framework.profile import SchedulerProfile
from aipaas.scheduler.framework.runtime import Scheduler
from aipaas.scheduler.framework.types import (
    MILLI_PER_GPU,
    Placement,
    PodRequest,
    Unschedulable,
)

if TYPE_CHECKING:
    from aipaas.devices.ledger import DeviceLedger


class PlacementEngine(Protocol):
    """What the actions need of the cluster."""

    nodes: Sequence[Node]

    def place(
        self, pods: Sequence[PodRequest], nodes: Collection[str] | None = None
    ) -> list[Placement] | Unschedulable:
        """All pods or none (on ``nodes`` only, when given), taking their resources."""
        ...

    def release(self, placement: Placement) -> None:
        """Give back what a placement (placed or held) took."""
        ...

    def hold(self, placement: Placement) -> None:
        """Take again what a placement takes (a running task; an undone release)."""
        ...

    def free(self, node: str) -> Resources:
        """What the node has free now (GPU as the sum of free milli over its GPUs)."""
        ...

    def capacity(self) -> Resources:
        """What all nodes offer."""
        ...


class SnapshotCluster:
    """A ``PlacementEngine`` over a fresh ClusterState of ``nodes`` and a profile's Scheduler."""

    def __init__(
        self,
        nodes: Sequence[Node],
        policy: str | SchedulerProfile = "default",
        seed: int = 0,
        *,
        workload: Sequence[PodRequest] = (),
        devices: DeviceLedger | None = None,
    ) -> None:
        self.nodes: Sequence[Node] = list(nodes)  # Sequence: as PlacementEngine declares it
        self.state = ClusterState(
            [
                NodeSpec(
                    name=n.name,
                    cpu_milli=n.cpu_milli,
                    memory_mib=n.memory_mib,
                    gpu_count=n.gpu_count,
                    gpu_model=n.gpu_model or ("gpu" if n.gpu_count else ""),
                    labels=dict(n.labels),
                    taints=n.taints,
                    gpu_memory_mib=n.gpu_memory_mib,
                    gpu_uuids=n.gpu_uuids,
                    unhealthy_gpus=n.unhealthy_gpus,
                    gpu_split=n.gpu_split,
                )
                for n in self.nodes
            ],
            devices=devices,
        )
        # Ties go to the node listed first: decisions a reader can work out by hand.
        self.scheduler = Scheduler(
            self.state, policy, seed, workload=workload, tiebreak_rank=np.arange(len(self.nodes))
        )

    def _mask(self, nodes: Collection[str] | None) -> BoolArray | None:
        if nodes is None:
            return None
        mask = np.zeros(len(self.state), dtype=np.bool_)
        for name in nodes:
            index = self.state.index_of.get(name)
            if index is not None:
                mask[index] = True
        return mask

    def place(
        self, pods: Sequence[PodRequest], nodes: Collection[str] | None = None
    ) -> list[Placement] | Unschedulable:
        return self.scheduler.schedule_gang(pods, self._mask(nodes))

    def release(self, placement: Placement) -> None:
        self.state.release(placement)

    def hold(self, placement: Placement) -> None:
        self.state.allocate(held_again(self.state, placement))

    def free(self, node: str) -> Resources:
        i = self.state.index_of[node]
        return Resources(
            int(self.state.gpu_free_total[i]),
            int(self.state.cpu_free[i]),
            int(self.state.memory_free[i]),
        )

    def gpus_free(self, node: str) -> tuple[int, ...]:
        """Free milli per GPU of the node (backfill reservations fit shares and whole GPUs)."""
        i = self.state.index_of[node]
        return tuple(int(v) for v in self.state.gpu_free[i, : int(self.state.gpu_count[i])])

    def fit_counts(self, pod: PodRequest, nodes: Collection[str] | None = None) -> dict[str, int]:
        """How many copies of ``pod`` each node could take now (nodes where it fits at all)."""
        counts = fit_counts(self.state, self.scheduler, pod, self._mask(nodes))
        return {self.state.nodes[int(i)].name: int(counts[i]) for i in np.flatnonzero(counts)}

    def capacity(self) -> Resources:
        return Resources(
            self.state.total_gpu_milli,
            int(self.state.cpu_capacity.sum()),
            int(self.state.memory_capacity.sum()),
        )


def fit_counts(
    state: ClusterState, scheduler: Scheduler, pod: PodRequest, allowed: BoolArray | None
) -> IntArray:
    """Per node, how many copies of ``pod`` fit in what is free now, where the profile's
    filters admit it (0 elsewhere): the count per node Kueue's topology-aware scheduling
    starts from. Whole GPUs count free whole GPUs; a share counts shares per GPU."""
    counts = np.zeros(len(state), dtype=np.int64)
    feasible = scheduler.feasible_nodes(pod, allowed)
    if feasible.size == 0:
        return counts
    unbounded = np.int64(2**40)
    per_node = np.full(feasible.size, unbounded, dtype=np.int64)
    if pod.cpu_milli:
        per_node = np.minimum(per_node, state.cpu_free[feasible] // pod.cpu_milli)
    if pod.memory_mib:
        per_node = np.minimum(per_node, state.memory_free[feasible] // pod.memory_mib)
    if pod.gpu_count and pod.gpu_milli >= MILLI_PER_GPU:
        per_node = np.minimum(per_node, state.whole_gpus_free[feasible] // pod.gpu_count)
    elif pod.gpu_count:
        shares = (state.gpu_free[feasible] // pod.gpu_milli).sum(axis=1)
        per_node = np.minimum(per_node, shares)
    counts[feasible] = per_node
    return counts


def held_again(state: ClusterState, placement: Placement) -> Placement:
    """What holding ``placement`` again takes: with a device ledger, the very devices its
    pod's claims gave back when it was released (the ledger kept them); the placement as it
    is when it gave none back."""
    if state.devices is None:
        return placement
    taken = state.devices.hold_again(placement.pod)
    if taken is None:
        return placement
    devices = NodeAllocation(placement.node, tuple(taken), 100.0) if taken else None
    return replace(placement, devices=devices)
