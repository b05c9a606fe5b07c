"""How big a node pool should be now: a pure function of its nodes, their use, the pending work
and the time (no I/O; the controller and the simulation both call ``plan_pool``).

Growth (as the Kubernetes cluster-autoscaler does): the pending jobs are placed, in their order,
on the free room of the pool's nodes and then on hypothetical new nodes of the pool's shape; as
many new nodes as that placement opened are asked for, in the cycle the work is seen. A job is
placed whole (a gang) or not at all, and a job no node of the shape could hold, or that would
need more than ``maxSize``, asks for nothing. A drained node still there is taken back before a
new one is made.

Shrink: a ready node with nothing running for ``idleThreshold`` is drained (cordoned: nothing new
lands); a drained node is removed only once it is empty, in a later cycle than its drain. A
scale-down therefore never kills a task. ``spec.size`` set by an admin pins the size: the pool
grows to it, and shrinks to it by draining the idlest nodes first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aipaas.autoscale.pool_provider import NodeState


@dataclass(frozen=True)
class Demand:
    """What one pod asks of a node."""

    cpu_milli: int
    memory_mib: int
    gpus: int = 0
    #: the GPU model it asks for (None: any)
    gpu_model: str | None = None


@dataclass(frozen=True)
class PendingJob:
    name: str
    pods: tuple[Demand, ...]


@dataclass(frozen=True)
class PoolShape:
    cpu_milli: int
    memory_mib: int
    gpus: int = 0
    gpu_model: str = ""

    def holds(self, pod: Demand) -> bool:
        """An empty node of this shape could hold the pod."""
        if pod.gpus and pod.gpu_model is not None and pod.gpu_model != self.gpu_model:
            return False
        return (
            pod.cpu_milli <= self.cpu_milli
            and pod.memory_mib <= self.memory_mib
            and pod.gpus <= self.gpus
        )


@dataclass(frozen=True)
class NodeUse:
    """A pool node as the planner sees it."""

    name: str
    state: NodeState
    #: what runs there now
    used: Demand
    tasks: int
    #: since when nothing runs there (None: something runs)
    idle_since: float | None


@dataclass(frozen=True)
class PoolLimits:
    min_size: int
    max_size: int
    #: the size an admin set (None: autoscaled)
    size: int | None
    idle_seconds: float


@dataclass(frozen=True)
class PoolPlan:
    create: int
    drain: tuple[str, ...]
    undrain: tuple[str, ...]
    delete: tuple[str, ...]
    #: the size aimed for once this plan is carried out
    target: int
    #: why, in words (events)
    reasons: tuple[str, ...]

    @property
    def changes(self) -> bool:
        return bool(self.create or self.drain or self.undrain or self.delete)


@dataclass
class _Room:
    cpu: int
    memory: int
    gpus: int
    #: the node's name ("" for a node yet to be made)
    node: str = ""
    taken: bool = False

    def take(self, pod: Demand) -> bool:
        if pod.cpu_milli <= self.cpu and pod.memory_mib <= self.memory and pod.gpus <= self.gpus:
            self.cpu -= pod.cpu_milli
            self.memory -= pod.memory_mib
            self.gpus -= pod.gpus
            self.taken = True
            return True
        return False


def _free(shape: PoolShape, node: NodeUse) -> _Room:
    return _Room(
        shape.cpu_milli - node.used.cpu_milli,
        shape.memory_mib - node.used.memory_mib,
        shape.gpus - node.used.gpus,
        node.name,
    )


def plan_pool(
    shape: PoolShape,
    limits: PoolLimits,
    nodes: Sequence[NodeUse],
    pending: Sequence[PendingJob],
    now: float,
) -> PoolPlan:
    active = [n for n in nodes if n.state != NodeState.DRAINING]
    draining = [n for n in nodes if n.state == NodeState.DRAINING]
    if limits.size is not None:
        return _pinned(limits.size, active, draining)
    create, undrain, wanted, reasons = _growth(shape, limits.max_size, active, draining, pending)
    reopened = set(undrain)
    target = len(active) + len(undrain) + create
    if target < limits.min_size:
        reasons.append(f"{limits.min_size - target} node(s) to reach minSize {limits.min_size}")
        create += limits.min_size - target
        target = limits.min_size
    drain: list[str] = []
    if not create and not undrain:
        idle = sorted(
            (
                n
                for n in active
                if n.state == NodeState.READY and n.idle_since is not None and n.name not in wanted
            ),
            key=lambda n: (n.idle_since, n.name),
        )
        for node in idle:
            assert node.idle_since is not None
            if target <= limits.min_size:
                break
            if now - node.idle_since >= limits.idle_seconds:
                drain.append(node.name)
                target -= 1
                idle_for = now - node.idle_since
                reasons.append(f"{node.name} idle for {idle_for:.0f}s: drained")
        if target > limits.max_size:  # maxSize lowered: drain the least used beyond it
            extra = _least_used([n for n in active if n.name not in drain])
            for node in extra[: target - limits.max_size]:
                drain.append(node.name)
                reasons.append(f"{node.name} drained: above maxSize {limits.max_size}")
            target = min(target, limits.max_size)
    delete = tuple(n.name for n in draining if n.tasks == 0 and n.name not in reopened)
    for name in delete:
        reasons.append(f"{name} drained and empty: removed")
    return PoolPlan(create, tuple(drain), tuple(undrain), delete, target, tuple(reasons))


def _growth(
    shape: PoolShape,
    max_size: int,
    active: Sequence[NodeUse],
    draining: Sequence[NodeUse],
    pending: Sequence[PendingJob],
) -> tuple[int, list[str], set[str], list[str]]:
    """New nodes and drained nodes to take back so that the pending jobs fit (in order), and
    the nodes pending work would use (not to be drained)."""
    rooms = [_free(shape, n) for n in active]
    spare = list(draining)  # taken back before any new node is made
    undrain: list[str] = []
    created = 0
    reasons: list[str] = []
    for job in pending:
        if not job.pods or not all(shape.holds(pod) for pod in job.pods):
            continue  # no node of this pool could hold it: growing would not help
        saved = ([_Room(**vars(r)) for r in rooms], list(spare), len(undrain))
        opened = created
        fits = True
        for pod in sorted(job.pods, key=lambda p: (-p.gpus, -p.cpu_milli, -p.memory_mib)):
            if any(room.take(pod) for room in rooms):
                continue
            back = next((i for i, n in enumerate(spare) if _free(shape, n).take(pod)), None)
            if back is not None:  # a drained node taken back: the pool does not grow
                node = spare.pop(back)
                undrain.append(node.name)
                room = _free(shape, node)
            elif len(active) + len(draining) + created >= max_size:
                fits = False  # drained nodes still there count against maxSize
                break
            else:
                created += 1
                room = _Room(shape.cpu_milli, shape.memory_mib, shape.gpus)
            room.take(pod)  # it does: checked above, or the shape holds each pod of the job
            rooms.append(room)
        if not fits:
            rooms, spare, kept = saved
            del undrain[kept:]
            created = opened
            reasons.append(f"job {job.name} would not fit even at maxSize {max_size}")
            continue
        if created > opened or len(undrain) > saved[2]:
            reasons.append(f"job {job.name} pending: needs {created - opened} new node(s)")
    wanted = {room.node for room in rooms if room.taken and room.node}
    return created, undrain, wanted, reasons


def _least_used(nodes: Sequence[NodeUse]) -> list[NodeUse]:
    """Nodes to drain first: empty ones (idle longest first), then those running least."""
    return sorted(
        nodes,
        key=lambda n: (n.tasks, n.used.gpus, n.idle_since if n.idle_since is not None else 0.0),
    )


def _pinned(size: int, active: Sequence[NodeUse], draining: Sequence[NodeUse]) -> PoolPlan:
    """The admin's size: grow to it (drained nodes back first), or drain down to it."""
    reasons: list[str] = []
    undrain: list[str] = []
    create = 0
    drain: list[str] = []
    missing = size - len(active)
    if missing > 0:
        undrain = [n.name for n in draining[:missing]]
        create = missing - len(undrain)
        reasons.append(f"scaled to {size} by an admin: {missing} node(s) more")
    elif missing < 0:
        drain = [n.name for n in _least_used(active)[:-missing]]
        reasons.append(f"scaled to {size} by an admin: {-missing} node(s) drained")
    reopened = set(undrain)
    delete = tuple(n.name for n in draining if n.tasks == 0 and n.name not in reopened)
    for name in delete:
        reasons.append(f"{name} drained and empty: removed")
    return PoolPlan(create, tuple(drain), tuple(undrain), delete, size, tuple(reasons))
