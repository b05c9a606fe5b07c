"""What fits where and when, for backfill reservations: a node's room at some time (CPU,
memory, free milli per GPU), given back as running jobs end (``Ending``), a first-fit of a
gang over it, and the fair share a queue would hold then (``Shares``).

The fit mirrors what the placement engine checks for a task (whole GPUs whole, a share on one
GPU, CPU, memory, GPU model), not its scores: a reservation needs the time and a set of nodes
that can hold the gang, not the engine's exact choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from aipaas.devices.ledger import gpu_index
from aipaas.scheduler.batch.model import Job, Node, Resources, Task
from aipaas.scheduler.batch.session_view import SessionPlan
from aipaas.scheduler.framework.types import MILLI_PER_GPU, Placement, PodRequest

if TYPE_CHECKING:
    from aipaas.scheduler.batch.cluster import PlacementEngine


@runtime_checkable
class PerGpuFree(Protocol):
    """An engine that can tell free milli per GPU of a node (SnapshotCluster can)."""

    def gpus_free(self, node: str) -> tuple[int, ...]: ...


@dataclass(slots=True)
class Room:
    """What one node offers at some time: CPU, memory, free milli per GPU."""

    cpu: int
    memory: int
    gpus: list[int]
    model: str

    def copy(self) -> Room:
        return Room(self.cpu, self.memory, list(self.gpus), self.model)

    def could_take(self, pod: PodRequest) -> bool:
        """A cheap first look: CPU, memory and the sum of free GPU are enough."""
        return (
            pod.cpu_milli <= self.cpu
            and pod.memory_mib <= self.memory
            and pod.gpu_milli_total <= sum(self.gpus)
        )

    def take(self, pod: PodRequest) -> bool:
        """Take the pod's resources if they fit (whole GPUs whole, a share on one GPU)."""
        if pod.cpu_milli > self.cpu or pod.memory_mib > self.memory:
            return False
        if pod.gpu_count:
            if pod.gpu_models and self.model not in pod.gpu_models:
                return False
            if pod.is_shared:
                fits = [i for i, free in enumerate(self.gpus) if free >= pod.gpu_milli]
                if not fits:
                    return False
                # The tightest GPU that fits: keep whole GPUs whole for whole-GPU tasks.
                chosen = [min(fits, key=lambda i: (self.gpus[i], i))]
            else:
                chosen = [i for i, free in enumerate(self.gpus) if free >= MILLI_PER_GPU]
                if len(chosen) < pod.gpu_count:
                    return False
                chosen = chosen[: pod.gpu_count]
            for i in chosen:
                self.gpus[i] -= pod.gpu_milli
        self.cpu -= pod.cpu_milli
        self.memory -= pod.memory_mib
        return True


def groups(nodes: Sequence[Node], level: str | None) -> list[list[str]]:
    """The node sets a gang may use: all nodes, or each domain of ``level`` (node order)."""
    if level is None:
        return [[n.name for n in nodes]]
    domains: dict[str, list[str]] = {}
    for node in nodes:
        value = node.labels.get(level)
        if value is not None:
            domains.setdefault(value, []).append(node.name)
    return list(domains.values())


def total(pods: Sequence[PodRequest]) -> Resources:
    total = Resources()
    for pod in pods:
        total = total + Resources.of_pod(pod)
    return total


def size(pod: PodRequest) -> tuple[int, int, int]:
    return (pod.gpu_milli_total, pod.cpu_milli, pod.memory_mib)


def spread(gpu_milli: int, count: int) -> list[int]:
    """Free milli per GPU when the engine tells only the total: whole GPUs first."""
    whole, rest = divmod(gpu_milli, MILLI_PER_GPU)
    gpus = [MILLI_PER_GPU] * min(whole, count) + ([rest] if rest and whole < count else [])
    return gpus + [0] * (count - len(gpus))


def give_back(rooms: dict[str, Room], copied: set[str], placement: Placement) -> None:
    """A running task ends: its node gets its room back (the node's Room is copied first,
    once, so that ``rooms`` can share Rooms with a cached view)."""
    if placement.node not in rooms:
        return
    if placement.node not in copied:
        rooms[placement.node] = rooms[placement.node].copy()
        copied.add(placement.node)
    room = rooms[placement.node]
    room.cpu += placement.cpu_milli
    room.memory += placement.memory_mib
    for g in placement.gpus:
        if g < len(room.gpus):
            room.gpus[g] += placement.gpu_milli


def fit(pods: Sequence[PodRequest], names: list[str], rooms: dict[str, Room]) -> set[str] | None:
    """First fit, largest pod first: the nodes used, or None when some pod finds no room."""
    trial: dict[str, Room] = {}  # rooms copied as pods are tried on them
    used: set[str] = set()
    for pod in pods:
        for name in names:
            room = trial.get(name)
            if room is None:
                if not rooms[name].could_take(pod):
                    continue
                room = trial[name] = rooms[name].copy()
            if room.take(pod):
                used.add(name)
                break
        else:
            return None
    return used


def rooms_now(engine: PlacementEngine) -> dict[str, Room]:
    """What every node offers now, per GPU where the engine can tell."""
    rooms: dict[str, Room] = {}
    per_gpu = engine if isinstance(engine, PerGpuFree) else None  # a slow check: once
    for node in engine.nodes:
        free = engine.free(node.name)
        if per_gpu is not None:
            gpus = list(per_gpu.gpus_free(node.name))
        else:
            gpus = spread(free.gpu_milli, node.gpu_count)
        model = node.gpu_model or ("gpu" if node.gpu_count else "")
        rooms[node.name] = Room(free.cpu_milli, free.memory_mib, gpus, model)
    return rooms


@dataclass(slots=True)
class Ending:
    """Running jobs whose runs end at ``at``: their placements, what they free in all, and
    what they held against each queue node (their queues' lineages), worked out once per view
    of the cluster."""

    at: float
    placements: list[Placement] = field(default_factory=list)
    freed: Resources = field(default_factory=Resources)
    held: dict[str, Resources] = field(default_factory=dict)

    def add_task(self, task: Task, lineage: Sequence[str]) -> None:
        """One running task more (a start since the view was made), as ``add`` counts it."""
        if self._give(task):
            for key in lineage:
                self.held[key] = self.held.get(key, Resources()) + task.resources

    def add(self, job: Job, lineage: Sequence[str]) -> None:
        amount = Resources()
        for task in job.running_tasks:
            if self._give(task):
                amount = amount + task.resources
        for key in lineage:
            self.held[key] = self.held.get(key, Resources()) + amount

    def _give(self, task: Task) -> bool:
        """What the task gives back when it ends: its placement, with the GPUs its claims
        hold whole as GPUs (its placement does not list them); False when it holds nothing."""
        placement = task.placement
        if placement is None:
            return False
        if not placement.gpus:
            gpus = task.device_gpus or claimed_gpus(placement)
            if gpus:
                placement = replace(placement, gpus=gpus, gpu_milli=MILLI_PER_GPU)
        self.placements.append(placement)
        gpu = placement.gpu_milli * len(placement.gpus)
        self.freed = self.freed + Resources(gpu, placement.cpu_milli, placement.memory_mib)
        return True


def claimed_gpus(placement: Placement) -> tuple[int, ...]:
    """The whole GPUs of its node that a placement's claims were given (a start of this cycle:
    a placement held from an earlier one has no devices, its task's ``device_gpus`` say)."""
    if placement.devices is None:
        return ()
    found = {
        index
        for pick in placement.devices.picks
        if pick.device.short.get("type") == "gpu"
        and pick.device.node == placement.node
        and (index := gpu_index(pick.device)) is not None
    }
    return tuple(sorted(found))


class Shares:
    """Fair share over the walk: the job's queue and each ancestor (the root aside) may not
    hold more than its fair share of what the gang asks for, after the start, as allocate
    demands; what they hold falls as their jobs end. Where fair share does not limit
    allocation (the queue order's ``limits_allocation``: not under ``fifo``) or none was
    computed, nothing is checked."""

    def __init__(self, session: SessionPlan, job: Job, gang: Resources) -> None:
        self.session = session
        limited = session.policy.queue_order.limits_allocation
        shares = session.fair_share if limited else {}
        self.limits = {k: shares[k] for k in session.lineage(job.queue) if k and k in shares}
        self.held = {k: session.allocated[k] for k in self.limits}
        self.gang = gang

    def release(self, ending: Ending) -> None:
        for key in self.limits:
            amount = ending.held.get(key)
            if amount is not None:
                self.held[key] = self.held[key] - amount

    def ok(self) -> bool:
        for key, share in self.limits.items():
            after = self.held[key] + self.gang
            for want, used, fair in zip(
                self.gang.as_tuple(), after.as_tuple(), share.as_tuple(), strict=True
            ):
                if want > 0 and used > fair:
                    return False
        return True
