"""The adapter to the scheduler: the only module of the controller that imports it.

Each cycle builds a fresh ClusterState from the known nodes, takes back the placements of every
task that holds resources (so a restarted controller sees the same allocations), and then
places pending gangs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from aipaas.api.devices import (
    AllocationResult,
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceSlice,
)
from aipaas.api.resource_vector import Resources
from aipaas.api.resources import Amounts
from aipaas.backends.base import NodeInfo
from aipaas.backends.composite import ON_REQUEST_LABEL
from aipaas.controller.workload import pool_of
from aipaas.data.affinity import DataView
from aipaas.data.affinity_profile import with_data_affinity
from aipaas.devices.gpu_health import GPU_UUIDS_ANNOTATION, parse_uuids
from aipaas.devices.inventory import Inventory, InventoryError
from aipaas.devices.ledger import DeviceLedger
from aipaas.scheduler.framework.cluster import ClusterState, NodeSpec
from aipaas.scheduler.framework.constraints import (
    TAINTS_ANNOTATION,
    UNHEALTHY_GPUS_ANNOTATION,
    parse_indices,
    parse_taints,
)
from aipaas.scheduler.framework.gpu_share import share_memory
from aipaas.scheduler.framework.profile import SchedulerProfile
from aipaas.scheduler.framework.runtime import Scheduler
from aipaas.scheduler.framework.types import (
    MILLI_PER_GPU,
    GpuShare,
    NodeConstraints,
    Placement,
    PodRequest,
    Unschedulable,
)
from aipaas.scheduler.plugins.data_affinity import data_affinity_of


@dataclass(frozen=True)
class Slot:
    """Where one task goes: node and GPUs."""

    name: str
    node: str
    node_index: int
    gpus: tuple[int, ...]
    gpu_milli: int
    #: status.allocation per claim name, for pods with DRA claims
    allocations: Mapping[str, AllocationResult] = field(default_factory=dict)
    #: what the scheduler took for it (``Placer.release`` gives it back)
    placement: Placement | None = None


@dataclass(frozen=True)
class Pod:
    name: str
    amounts: Amounts
    gpu_models: tuple[str, ...] = ()
    claims: tuple[ResourceClaim, ...] = ()  # DRA claims (names unique within the pod)
    #: the ``gpu:`` short form is one of ``claims``: the device allocator, not the GPU
    #: count, gives its GPUs (``amounts`` keep the count for quotas)
    gpu_claim: bool = False
    #: the job asks for nodes that take work only on request (simulated ones)
    on_request: bool = False
    #: the job's nodeSelector, node affinity and tolerations (scheduler/batch/from_api.py)
    constraints: NodeConstraints | None = None
    #: a share of each GPU by memory and cores (scheduler/batch/from_api.py ``gpu_share``)
    share: GpuShare | None = None


@dataclass(frozen=True)
class Devices:
    """What the device allocator sees: published slices, classes, already-allocated claims."""

    slices: Sequence[ResourceSlice] = ()
    classes: Sequence[DeviceClass] = ()
    allocated: Sequence[ResourceClaim] = ()
    inventory: Inventory | None = None  # the slices, already indexed (see SliceIndex)


class SliceIndex:
    """One Inventory kept across cycles: a slice is indexed again only when it changed (a new
    object: stored objects are parsed once per resourceVersion), so selector answers cached
    per device survive the cycles where nothing changed. A slice whose pool allocates nothing
    (the same device twice, slices missing: devices/inventory.py) has the reason in
    ``refused``; the other pools are unaffected."""

    def __init__(self) -> None:
        self.inventory = Inventory()
        self._indexed: dict[str, ResourceSlice] = {}
        self.refused: dict[str, str] = {}
        self._rules: list[DeviceTaintRule] = []

    def set_taint_rules(self, rules: Sequence[DeviceTaintRule]) -> None:
        """The stored DeviceTaintRules: their taints go on the devices they select. Every
        device is tainted again only when the rules changed (stored objects are parsed once
        per resourceVersion, so unchanged rules are the very same models)."""
        if len(rules) == len(self._rules) and all(
            a is b for a, b in zip(rules, self._rules, strict=True)
        ):
            return
        self._rules = list(rules)
        self.inventory.set_taint_rules(self._rules)

    def update(self, slices: Sequence[ResourceSlice]) -> Inventory:
        wanted = {s.metadata.name or "": s for s in slices}
        for name in [n for n in self._indexed if n not in wanted]:
            self.inventory.remove_slice(name)
            del self._indexed[name]
        for name in [n for n in self.refused if n not in wanted]:
            del self.refused[name]
        for name, item in wanted.items():
            if self._indexed.get(name) is item:
                continue
            if name in self._indexed:
                self.inventory.remove_slice(name)
                del self._indexed[name]
            try:
                self.inventory.put_slice(item)
            except InventoryError as err:
                self.refused[name] = str(err)
                continue
            self.refused.pop(name, None)
            self._indexed[name] = item
        for name in self._indexed:
            problem = self.inventory.pool_problem(name)
            if problem is None:
                self.refused.pop(name, None)
            else:
                self.refused[name] = f"pool allocates nothing: {problem}"
        return self.inventory


NO_NODE = "no node takes this job (simulated nodes take only jobs that ask for them)"


#: node name -> the NodeInfo last turned into a NodeSpec, and that spec: a cycle's Placer is
#: made of the nodes the inventory reported, the same nodes cycle after cycle (their
#: annotations are parsed once, not every cycle for every node)
_SPECS: dict[str, tuple[NodeInfo, NodeSpec]] = {}
_SPECS_KEPT = 100_000


def node_spec(info: NodeInfo) -> NodeSpec:
    """A backend's node as the scheduler sees it (both are frozen: one spec serves every
    cycle that places on a node reported the same)."""
    cached = _SPECS.get(info.name)
    if cached is not None and (cached[0] is info or cached[0] == info):
        return cached[1]
    spec = NodeSpec(
        name=info.name,
        cpu_milli=info.cpu_milli,
        memory_mib=info.memory_mib,
        gpu_count=info.gpu_count,
        gpu_model=info.gpu_model,
        labels=dict(info.labels),
        taints=parse_taints(info.annotations.get(TAINTS_ANNOTATION, "")),
        gpu_memory_mib=info.gpu_memory_mib,
        unhealthy_gpus=parse_indices(info.annotations.get(UNHEALTHY_GPUS_ANNOTATION, "")),
        gpu_uuids=parse_uuids(info.annotations.get(GPU_UUIDS_ANNOTATION, "")),
    )
    if len(_SPECS) >= _SPECS_KEPT:
        _SPECS.clear()
    _SPECS[info.name] = (info, spec)
    return spec


class _Pool:
    """Nodes placed together: one ClusterState and its scheduler."""

    def __init__(
        self,
        nodes: Sequence[NodeInfo],
        policy: str,
        ledger: DeviceLedger,
        workload: Sequence[PodRequest] = (),
        data: DataView | None = None,
    ) -> None:
        self.nodes = list(nodes)
        self.state = ClusterState([node_spec(n) for n in self.nodes], devices=ledger)
        profile: str | SchedulerProfile = policy if data is None else with_data_affinity(policy)
        # Ties go to the node listed first, as in ``aipaas simulate`` (batch/cluster.py): the
        # live cycle and the simulator decide the same from the same state.
        self.scheduler = Scheduler(
            self.state, profile, workload=workload, tiebreak_rank=np.arange(len(self.state))
        )
        scorer = data_affinity_of(self.scheduler) if data is not None else None
        if scorer is not None and data is not None:
            scorer.view = data


class Placer:
    """The cycle's cluster. Nodes labelled ``on-request`` (the demo backend's simulated ones)
    form a pool of their own that only pods asking for it (``Pod.on_request``) go to; such a
    pod goes to the ordinary nodes only where there is no such pool (the sim backend alone).
    The pools share no node, so one GPU is never in two of them; DRA devices are one ledger.

    With ``pool_policies`` (node pool -> profile, controller/workload.py), the ordinary nodes
    are split by their ``aipaas.dev/pool`` label, each pool placing with its own profile (a
    pool not named uses ``policy``); a gang goes to the first pool, by name, that holds it
    whole. ``workload``: the pod shapes FGD-class scoring expects (learned from submissions).
    """

    def __init__(
        self,
        nodes: Sequence[NodeInfo],
        policy: str = "default",
        devices: Devices | None = None,
        *,
        workload: Sequence[PodRequest] = (),
        pool_policies: Mapping[str, str] | None = None,
        data: DataView | None = None,
    ) -> None:
        self.nodes = sorted(nodes, key=lambda n: n.name)
        self.ledger = _ledger(devices or Devices())
        on_request = [n for n in self.nodes if n.labels.get(ON_REQUEST_LABEL) == "true"]
        ordinary = [n for n in self.nodes if n.labels.get(ON_REQUEST_LABEL) != "true"]
        groups: dict[str, list[NodeInfo]] = {}
        for node in ordinary:
            groups.setdefault(pool_of(node.labels) if pool_policies else "", []).append(node)
        self.ordinary_pools = [
            _Pool(members, (pool_policies or {}).get(name, policy), self.ledger, workload, data)
            for name, members in sorted(groups.items())
        ] or [_Pool([], policy, self.ledger, workload, data)]
        self.ordinary = self.ordinary_pools[0]
        self.on_request = (
            _Pool(on_request, policy, self.ledger, workload, data) if on_request else None
        )
        self._pools = [*self.ordinary_pools, *([self.on_request] if self.on_request else [])]
        self._pool_of = {n.name: pool for pool in self._pools for n in pool.nodes}

    def hold(self, pod: Pod, node: str, gpus: tuple[int, ...], gpu_milli: int) -> str | None:
        """Take back a running task's allocation; the reason when it cannot be held."""
        held = self.hold_placement(pod, node, gpus, gpu_milli)
        return held if isinstance(held, str) else None

    def hold_placement(
        self,
        pod: Pod,
        node: str,
        gpus: tuple[int, ...],
        gpu_milli: int,
        allocations: Mapping[str, AllocationResult] | None = None,
    ) -> Placement | str:
        """``hold``, giving the placement held (what a batch session may release), or the
        reason it cannot be held. ``allocations``: the stored allocations of the pod's claims
        (by claim name); the pod then owns their devices in the ledger, so that releasing the
        placement frees them (an eviction frees a claim's GPUs as it frees counted ones)."""
        pool = self._pool_of.get(node)
        if pool is None:
            return f"node {node} is gone"
        index = pool.state.index_of[node]
        held = gpus
        if pod.claims:
            # GPUs of claims are held by the device ledger (rebuilt from the stored claims),
            # which shows them in the GPU columns too: taking them here would count them
            # twice. Only GPUs asked by count besides the claims are taken (``gpu: 1`` where
            # GPUs publish no devices, with ``example.com/fpga: 1``).
            by_count = pod.amounts.gpu_count > 0 and not pod.gpu_claim
            claimed = set(self._claim_gpus(node, (allocations or {}).values()))
            held = tuple(g for g in gpus if g not in claimed) if by_count else ()
        placement = Placement(
            pod=pod.name,
            node=node,
            node_index=index,
            gpus=held,
            gpu_milli=gpu_milli,
            cpu_milli=pod.amounts.cpu_milli,
            memory_mib=pod.amounts.memory_mib,
            share=pod.share is not None,
            gpu_memory_mib=share_memory(pool.state, pod.share, index) if pod.share else 0,
        )
        try:
            pool.state.allocate(placement)
        except ValueError as err:
            return str(err)
        if pod.claims and allocations:
            self.ledger.adopt(pod.name, node, pod.claims, allocations)
        return placement

    def pools_for(self, on_request: bool) -> list[_Pool]:
        """The pools a gang may go to, in order: the on-request pool when every pod asks for it
        and there is one; the ordinary pools otherwise."""
        if on_request and self.on_request is not None:
            return [self.on_request]
        return [p for p in self.ordinary_pools if p.nodes] or [self.ordinary]

    def pool_of(self, node: str) -> _Pool | None:
        return self._pool_of.get(node)

    @property
    def pools(self) -> list[_Pool]:
        return list(self._pools)

    def place(self, pods: Sequence[Pod]) -> list[Slot] | tuple[str, ...]:
        """All pods or none; the scheduler's reasons when they do not fit."""
        reasons: tuple[str, ...] = (NO_NODE,)
        for pool in self.pools_for(all(pod.on_request for pod in pods)):
            if not pool.nodes:
                continue
            result = pool.scheduler.schedule_gang([_request(pod) for pod in pods])
            if isinstance(result, Unschedulable):
                reasons = result.reasons
                continue
            break
        else:
            return reasons
        claims = {pod.name: pod.claims for pod in pods}
        return [self.slot(p, claims.get(p.pod, ())) for p in result]

    def slot(self, p: Placement, claims: Sequence[ResourceClaim]) -> Slot:
        """The slot of a placement the scheduler made: its GPUs, and the allocation of each
        of its DRA claims."""
        allocations: dict[str, AllocationResult] = {}
        if p.devices is not None and claims:
            allocations = self.ledger.results(p.pod, tuple(claims))
            if not allocations:
                allocations = {
                    c.metadata.name or "": p.devices.allocation_result(c, self.ledger.classes)
                    for c in claims
                }
        gpus, milli = p.gpus, p.gpu_milli
        claimed = self._claim_gpus(p.node, allocations.values()) if allocations else ()
        if claimed:
            # The task holds its claims' whole GPUs and any it asked by count besides them.
            gpus, milli = tuple(sorted({*p.gpus, *claimed})), MILLI_PER_GPU
        return Slot(p.pod, p.node, p.node_index, gpus, milli, allocations, p)

    def release(self, slots: Sequence[Slot]) -> None:
        """Give back what ``place`` took for ``slots`` (a placement that a quota then refused)."""
        for slot in slots:
            if slot.placement is not None:
                self._pool_of[slot.node].state.release(slot.placement)

    def _claim_gpus(self, node: str, allocations: Iterable[AllocationResult]) -> tuple[int, ...]:
        """The node's whole GPUs (by index) among the devices of a task's claims: what its
        status lists and GPU-hours count (MIG partitions and other devices are not GPUs)."""
        gpus = set()
        for allocation in allocations:
            for result in allocation.devices.results:
                device = self.ledger.inventory.by_id.get(
                    (result.driver, result.pool, result.device)
                )
                if device is None or device.short.get("type") != "gpu":
                    continue
                index = self.ledger.gpu_on(node, device)
                if index is not None:
                    gpus.add(index)
        return tuple(sorted(gpus))

    def capacity(self) -> Resources:
        """What all nodes offer (no GPU memory: the session counts that per GPU)."""
        return Resources(
            gpu_milli=sum(p.state.total_gpu_milli for p in self._pools),
            cpu_milli=sum(int(p.state.cpu_capacity.sum()) for p in self._pools),
            memory_mib=sum(int(p.state.memory_capacity.sum()) for p in self._pools),
        )

    def allocated(self) -> dict[str, tuple[int, int, float]]:
        """Per node: CPU millicores, memory MiB and GPUs (fractions count) in use."""
        out = {}
        for pool in self._pools:
            state = pool.state
            for i, node in enumerate(state.nodes):
                out[node.name] = (
                    int(state.cpu_capacity[i] - state.cpu_free[i]),
                    int(state.memory_capacity[i] - state.memory_free[i]),
                    (node.gpu_count * 1000 - int(state.gpu_free_total[i])) / 1000,
                )
        return out

    @property
    def gpus_total(self) -> float:
        return sum(p.state.total_gpu_milli for p in self._pools) / 1000

    @property
    def gpus_allocated(self) -> float:
        return sum(p.state.allocated_gpu_milli for p in self._pools) / 1000


def pod_request(pod: Pod) -> PodRequest:
    """What the scheduler places for a pod."""
    return _request(pod)


def fit_request(pod: Pod) -> PodRequest | None:
    """The pod asking for its GPUs by count, when its only claim is the compiled ``gpu:`` short
    form (whole GPUs, as the count path asks for them): what backfill reservations, which see
    GPUs by count, fit for it. None for pods without claims or with claims of their own."""
    if not pod.gpu_claim or len(pod.claims) != 1:
        return None
    return _request(replace(pod, claims=(), gpu_claim=False))


def _request(pod: Pod) -> PodRequest:
    amounts = pod.amounts
    count = 0 if pod.gpu_claim else amounts.gpu_count
    return PodRequest(
        name=pod.name,
        cpu_milli=amounts.cpu_milli,
        memory_mib=amounts.memory_mib,
        gpu_count=count,
        gpu_milli=amounts.gpu_milli if count else 0,
        gpu_models=() if pod.gpu_claim else pod.gpu_models,
        claims=pod.claims,
        constraints=pod.constraints,
        share=pod.share,
    )


def _ledger(devices: Devices) -> DeviceLedger:
    inventory = devices.inventory if devices.inventory is not None else Inventory(devices.slices)
    classes = {c.metadata.name or "": c for c in devices.classes}
    allocated = list(devices.allocated)
    try:
        return DeviceLedger.from_claims(inventory, classes, allocated)
    except InventoryError:
        # A claim names a device no longer published: the others still hold theirs.
        kept = [c for c in allocated if _published(inventory, c)]
        return DeviceLedger.from_claims(inventory, classes, kept)


def _published(inventory: Inventory, claim: ResourceClaim) -> bool:
    allocation = claim.status.allocation if claim.status else None
    if allocation is None:
        return False
    return all((r.driver, r.pool, r.device) in inventory.by_id for r in allocation.devices.results)
