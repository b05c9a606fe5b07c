"""Cluster state for scheduling: per-node and per-GPU free capacity held in NumPy columns.

Feasibility and scores are computed for many nodes at once from these columns. Every change to
a node bumps its ``version``; score caches compare versions to recompute only what changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from aipaas.scheduler.framework.types import MILLI_PER_GPU, Placement, PodRequest, Taint

if TYPE_CHECKING:
    from aipaas.devices.inventory import DeviceInfo
    from aipaas.devices.ledger import DeviceLedger

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A node as the scheduler sees it: capacity, GPU count and model, labels, taints."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_model: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    #: memory of each GPU, MiB (0: not known; a share asking memory in MiB does not fit)
    gpu_memory_mib: int = 0
    #: each GPU's UUID, by index (empty: not known)
    gpu_uuids: tuple[str, ...] = ()
    #: GPUs that take nothing new (their running tasks stay accounted)
    unhealthy_gpus: tuple[int, ...] = ()
    #: at most this many shares on one GPU (HAMi's deviceSplitCount)
    gpu_split: int = 10

    def __post_init__(self) -> None:
        for attribute in ("cpu_milli", "memory_mib", "gpu_count"):
            value = getattr(self, attribute)
            if value < 0:
                raise ValueError(f"node {self.name!r}: {attribute} must be >= 0, got {value}")
        if self.gpu_count > 0 and not self.gpu_model:
            raise ValueError(f"node {self.name!r}: gpu_model is required when gpu_count > 0")


def gpu_affinity_tag(pod: PodRequest) -> str:
    """The kind of GPU use a pod represents: 'share' or '<count>-gpu' ('' for CPU-only)."""
    if pod.gpu_count == 0:
        return ""
    return "share" if pod.is_shared else f"{pod.gpu_count}-gpu"


class ClusterState:
    """Free capacity of every node and GPU, with allocate and release."""

    def __init__(self, nodes: Sequence[NodeSpec], devices: DeviceLedger | None = None) -> None:
        names = [node.name for node in nodes]
        if len(set(names)) != len(names):
            duplicate = next(name for name, n in Counter(names).items() if n > 1)
            raise ValueError(f"node {duplicate!r} appears more than once")
        self.nodes: tuple[NodeSpec, ...] = tuple(nodes)
        self.index_of: dict[str, int] = {name: i for i, name in enumerate(names)}
        count = len(nodes)
        self.max_gpus = max((node.gpu_count for node in nodes), default=0)
        self.models: tuple[str, ...] = tuple(sorted({n.gpu_model for n in nodes if n.gpu_model}))
        model_ids = {model: i for i, model in enumerate(self.models)}

        self.cpu_capacity: IntArray = np.array([n.cpu_milli for n in nodes], dtype=np.int64)
        self.memory_capacity: IntArray = np.array([n.memory_mib for n in nodes], dtype=np.int64)
        self.gpu_count: IntArray = np.array([n.gpu_count for n in nodes], dtype=np.int64)
        # -1 marks a node without GPUs; model ids index self.models.
        self.model_id: IntArray = np.array(
            [model_ids.get(n.gpu_model, -1) for n in nodes], dtype=np.int64
        )
        self.cpu_free: IntArray = self.cpu_capacity.copy()
        self.memory_free: IntArray = self.memory_capacity.copy()
        # Free milli per GPU; slots past a node's own GPUs stay 0, which no GPU request can use.
        self.gpu_free: IntArray = np.zeros((count, max(self.max_gpus, 1)), dtype=np.int64)
        for i, node in enumerate(nodes):
            self.gpu_free[i, : node.gpu_count] = MILLI_PER_GPU
        # GPU shares (HAMi): memory per GPU, shares per GPU; GPUs that exist and are healthy.
        # An unhealthy GPU shows no free milli and no free memory, ever: nothing new goes
        # there, and the tasks it holds are accounted without being checked (``_sick``).
        width = self.gpu_free.shape[1]
        self.gpu_memory: IntArray = np.zeros((count, width), dtype=np.int64)
        self.gpu_memory_used: IntArray = np.zeros((count, width), dtype=np.int64)
        self.gpu_shares: IntArray = np.zeros((count, width), dtype=np.int64)
        self.gpu_split: IntArray = np.array([n.gpu_split for n in nodes], dtype=np.int64)
        self.gpu_ok: BoolArray = np.zeros((count, width), dtype=np.bool_)
        self._sick: set[tuple[int, int]] = set()
        for i, node in enumerate(nodes):
            self.gpu_memory[i, : node.gpu_count] = node.gpu_memory_mib
            self.gpu_ok[i, : node.gpu_count] = True
            for g in node.unhealthy_gpus:
                if 0 <= g < node.gpu_count:
                    self._sick.add((i, g))
                    self.gpu_ok[i, g] = False
                    self.gpu_free[i, g] = 0
                    self.gpu_memory_used[i, g] = node.gpu_memory_mib
        self.gpu_free_total: IntArray = self.gpu_free.sum(axis=1)
        self.gpu_free_max: IntArray = self.gpu_free.max(axis=1)
        self.whole_gpus_free: IntArray = (self.gpu_free == MILLI_PER_GPU).sum(axis=1)
        self.version: IntArray = np.zeros(count, dtype=np.int64)
        self.gpu_tags: list[Counter[str]] = [Counter() for _ in nodes]
        self.pod_count: IntArray = np.zeros(count, dtype=np.int64)
        #: DRA devices (slices, classes, holdings) for pods with claims; None without DRA.
        self.devices = devices
        # GPUs that device claims hold (whole, MIG partitions, shares) show as taken in the
        # GPU columns, so count-based work and GPU scores see them: (node, gpu) -> devices on
        # it that claims hold, and the milli each took from the column.
        self._claim_holds: Counter[tuple[int, int]] = Counter()
        self._claim_taken: dict[tuple[int, int], int] = {}
        if devices is not None:
            for node_name, gpu in devices.claim_gpus():
                index = self.index_of.get(node_name)
                if index is not None:
                    self._mirror(index, gpu, +1)

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def total_gpu_milli(self) -> int:
        return int(self.gpu_count.sum()) * MILLI_PER_GPU

    @property
    def allocated_gpu_milli(self) -> int:
        return self.total_gpu_milli - int(self.gpu_free_total.sum())

    def model_mask(self, models: Sequence[str]) -> BoolArray:
        """Nodes whose GPU model is one of ``models`` (all nodes when ``models`` is empty)."""
        if not models:
            return np.ones(len(self.nodes), dtype=np.bool_)
        allowed = np.zeros(len(self.models) + 1, dtype=np.bool_)
        for model in models:
            if model in self.models:
                allowed[self.models.index(model)] = True
        return allowed[self.model_id]  # id -1 reads the trailing False

    def allocate(self, placement: Placement) -> None:
        """Take the placement's CPU, memory and GPU share; refuse anything over capacity."""
        i = placement.node_index
        self._check_node(placement)
        self._check_gpus(placement)
        sick = self._sick
        for g in placement.gpus:
            if sick and (i, g) in sick:
                continue  # a task that runs there already: accounted, not checked
            if self.gpu_free[i, g] < placement.gpu_milli:
                raise ValueError(
                    f"placement of {placement.pod!r}: GPU {g} of {placement.node} has "
                    f"{self.gpu_free[i, g]} milli free, {placement.gpu_milli} asked"
                )
            if placement.share and (
                self.gpu_memory_used[i, g] + placement.gpu_memory_mib > self.gpu_memory[i, g]
            ):
                raise ValueError(
                    f"placement of {placement.pod!r}: GPU {g} of {placement.node} has "
                    f"{self.gpu_memory[i, g] - self.gpu_memory_used[i, g]} MiB free, "
                    f"{placement.gpu_memory_mib} asked"
                )
        if self.cpu_free[i] < placement.cpu_milli:
            raise ValueError(f"placement of {placement.pod!r}: not enough CPU on {placement.node}")
        if self.memory_free[i] < placement.memory_mib:
            raise ValueError(
                f"placement of {placement.pod!r}: not enough memory on {placement.node}"
            )
        if self.devices is not None and placement.gpus:
            # Count-based GPUs hold their published devices, so claims cannot take them.
            problem = self.devices.hold_gpus(placement.pod, placement.node, placement.gpus)
            if problem is not None:
                raise ValueError(f"placement of {placement.pod!r}: {problem}")
        self._apply(placement, sign=-1)
        if placement.devices is not None:
            for pick in placement.devices.picks:
                self._mirror_pick(i, placement.node, pick.device, +1)

    def release(self, placement: Placement) -> None:
        """Give back what ``allocate`` took for this placement."""
        i = placement.node_index
        self._check_node(placement)
        self._check_gpus(placement)
        sick = self._sick
        for g in placement.gpus:
            if (
                not (sick and (i, g) in sick)
                and self.gpu_free[i, g] + placement.gpu_milli > MILLI_PER_GPU
            ):
                raise ValueError(f"release of {placement.pod!r}: GPU {g} would exceed capacity")
        if self.cpu_free[i] + placement.cpu_milli > self.cpu_capacity[i]:
            raise ValueError(f"release of {placement.pod!r}: CPU would exceed capacity")
        if self.memory_free[i] + placement.memory_mib > self.memory_capacity[i]:
            raise ValueError(f"release of {placement.pod!r}: memory would exceed capacity")
        if self.devices is not None:
            for pick in self.devices.unreserve(placement.pod):
                self._mirror_pick(i, placement.node, pick.device, -1)
        self._apply(placement, sign=+1)

    def _mirror_pick(self, i: int, node: str, device: DeviceInfo, sign: int) -> None:
        gpu = self.devices.gpu_on(node, device) if self.devices is not None else None
        if gpu is not None:
            self._mirror(i, gpu, sign)

    def _mirror(self, i: int, gpu: int, sign: int) -> None:
        """One more (+1) or one fewer (-1) claim-held device on GPU ``gpu`` of node ``i``."""
        if not 0 <= gpu < self.gpu_count[i]:
            return  # a device the node's GPU columns do not know
        key = (i, gpu)
        self._claim_holds[key] += sign
        if sign > 0 and self._claim_holds[key] == 1:
            taken = int(self.gpu_free[i, gpu])
            self._claim_taken[key] = taken
            self.gpu_free[i, gpu] -= taken
        elif sign < 0 and self._claim_holds[key] <= 0:
            del self._claim_holds[key]
            self.gpu_free[i, gpu] += self._claim_taken.pop(key, 0)
        else:
            return
        self._summarise_gpus(i)
        self.version[i] += 1

    def _summarise_gpus(self, i: int) -> None:
        """The per-node GPU columns derived from node ``i``'s row of ``gpu_free``."""
        row = self.gpu_free[i]
        self.gpu_free_total[i] = row.sum()
        self.gpu_free_max[i] = row.max()
        self.whole_gpus_free[i] = int((row == MILLI_PER_GPU).sum())

    def _check_node(self, placement: Placement) -> None:
        i = placement.node_index
        if not 0 <= i < len(self.nodes) or self.nodes[i].name != placement.node:
            raise ValueError(f"placement of {placement.pod!r}: unknown node {placement.node!r}")

    def _check_gpus(self, placement: Placement) -> None:
        gpus = list(placement.gpus)
        if len(set(gpus)) != len(gpus):
            raise ValueError(f"placement of {placement.pod!r} names a GPU twice: {gpus}")
        for g in gpus:
            if not 0 <= g < self.gpu_count[placement.node_index]:
                raise ValueError(f"placement of {placement.pod!r}: node has no GPU {g}")

    def _apply(self, placement: Placement, sign: int) -> None:
        i = placement.node_index
        self.cpu_free[i] += sign * placement.cpu_milli
        self.memory_free[i] += sign * placement.memory_mib
        sick = self._sick
        for g in placement.gpus:
            if sick and (i, g) in sick:
                continue
            self.gpu_free[i, g] += sign * placement.gpu_milli
            if placement.share:
                self.gpu_memory_used[i, g] -= sign * placement.gpu_memory_mib
                self.gpu_shares[i, g] -= sign
        if placement.gpus:
            self._summarise_gpus(i)
            tag = "share" if placement.gpu_milli < MILLI_PER_GPU else f"{len(placement.gpus)}-gpu"
            # sign is -1 when allocating (capacity goes down) and the node gains a pod.
            self.gpu_tags[i][tag] -= sign
            if self.gpu_tags[i][tag] <= 0:
                del self.gpu_tags[i][tag]
        self.pod_count[i] -= sign
        self.version[i] += 1
