"""Property tests of the node pool autoscaler in simulation (hypothesis): jobs arrive, a simple
gang scheduler places them on ready, undrained nodes, and ``plan_pool`` runs every cycle.

- pending work the pool could hold triggers growth in the cycle it is seen;
- a node is drained only after it was idle for the threshold, and once all work is done every
  node beyond minSize is gone soon after the threshold;
- no task is ever killed by a scale-down: a node is removed only with nothing running, every
  task runs its whole duration, and the pool never exceeds maxSize.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from aipaas.autoscale.pool_plan import (
    Demand,
    NodeUse,
    PendingJob,
    PoolLimits,
    PoolShape,
    plan_pool,
)
from aipaas.autoscale.pool_provider import NodeState

SHAPE = PoolShape(cpu_milli=64_000, memory_mib=512 * 1024, gpus=8, gpu_model="H100")
CYCLE = 10.0  # seconds between controller cycles


@dataclass(frozen=True)
class JobSpec:
    name: str
    arrives: int  # cycle
    pods: int
    gpus: int  # per pod
    runs: int  # cycles


@dataclass
class Node:
    state: NodeState
    ready_at: float
    idle_since: float | None
    running: list[tuple[str, int, float]] = field(default_factory=list)  # job, gpus, end


@dataclass
class World:
    limits: PoolLimits
    delay: float
    nodes: dict[str, Node] = field(default_factory=dict)
    made: int = 0
    pending: list[JobSpec] = field(default_factory=list)
    started: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    drained_after_idle: list[float] = field(default_factory=list)

    def free(self, node: Node) -> int:
        return SHAPE.gpus - sum(gpus for _, gpus, _ in node.running)

    def schedule(self, now: float) -> None:
        for job in list(self.pending):
            room = {
                n: self.free(node)
                for n, node in self.nodes.items()
                if node.state == NodeState.READY
            }
            placed: list[str] = []
            for _ in range(job.pods):
                target = next((n for n, free in room.items() if free >= job.gpus), None)
                if target is None:
                    break
                room[target] -= job.gpus
                placed.append(target)
            if len(placed) < job.pods:
                continue
            for name in placed:
                self.nodes[name].running.append((job.name, job.gpus, now + job.runs * CYCLE))
                self.nodes[name].idle_since = None
            self.pending.remove(job)
            self.started[job.name] = now

    def finish(self, now: float) -> None:
        for node in self.nodes.values():
            for job, _gpus, end in list(node.running):
                if end <= now:
                    node.running.remove((job, _gpus, end))
                    self.finished[job] = end
            if (
                not node.running
                and node.idle_since is None
                and node.state != NodeState.PROVISIONING
            ):
                node.idle_since = now
            if node.state == NodeState.PROVISIONING and now >= node.ready_at:
                node.state, node.idle_since = NodeState.READY, now

    def uses(self) -> list[NodeUse]:
        return [
            NodeUse(
                name,
                node.state,
                Demand(0, 0, SHAPE.gpus - self.free(node)),
                len(node.running),
                node.idle_since if node.state == NodeState.READY and not node.running else None,
            )
            for name, node in self.nodes.items()
        ]


def pending_jobs(jobs: list[JobSpec]) -> list[PendingJob]:
    return [
        PendingJob(j.name, tuple(Demand(1000, 1024, j.gpus, "H100") for _ in range(j.pods)))
        for j in jobs
    ]


def fits_free_room(world: World, job: JobSpec) -> bool:
    room = [world.free(n) for n in world.nodes.values() if n.state != NodeState.DRAINING]
    for _ in range(job.pods):
        index = next((i for i, free in enumerate(room) if free >= job.gpus), None)
        if index is None:
            return False
        room[index] -= job.gpus
    return True


def nodes_needed(job: JobSpec) -> int:
    per_node = SHAPE.gpus // job.gpus
    return -(-job.pods // per_node)


jobs_strategy = st.lists(
    st.builds(
        JobSpec,
        name=st.just(""),
        arrives=st.integers(0, 20),
        pods=st.integers(1, 4),
        gpus=st.sampled_from([1, 2, 4, 8]),
        runs=st.integers(1, 12),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(
    jobs=jobs_strategy,
    min_size=st.integers(0, 2),
    extra=st.integers(0, 5),
    delay_cycles=st.integers(0, 3),
    idle_cycles=st.integers(1, 6),
    pinned=st.none() | st.tuples(st.integers(0, 25), st.integers(0, 7)),
)
def test_pool_autoscaler_properties(
    jobs: list[JobSpec],
    min_size: int,
    extra: int,
    delay_cycles: int,
    idle_cycles: int,
    pinned: tuple[int, int] | None,
) -> None:
    """``pinned``: from that cycle, for 15 cycles, an admin holds the pool at that size (cut to
    min/max as the API does), then hands it back to the autoscaler."""
    jobs = [JobSpec(f"j{i}", j.arrives, j.pods, j.gpus, j.runs) for i, j in enumerate(jobs)]
    auto = PoolLimits(min_size, min_size + extra, None, idle_cycles * CYCLE)
    world = World(auto, delay_cycles * CYCLE)
    last_cycle = 21 + 12 * (len(jobs) + 1) * 2 + idle_cycles + delay_cycles + 10
    for cycle in range(last_cycle):
        now = cycle * CYCLE
        world.pending.extend(j for j in jobs if j.arrives == cycle)
        world.finish(now)
        world.schedule(now)
        limits = auto
        if pinned is not None and pinned[0] <= cycle < pinned[0] + 15:
            size = min(max(pinned[1], auto.min_size), auto.max_size)
            limits = PoolLimits(auto.min_size, auto.max_size, size, auto.idle_seconds)
        plan = plan_pool(SHAPE, limits, world.uses(), pending_jobs(world.pending), now)
        # Growth within one cycle: the first waiting job that the free room cannot hold, but
        # the pool could if it grew within maxSize, makes it grow now.
        if world.pending and limits.size is None:
            first = world.pending[0]
            if not fits_free_room(world, first) and nodes_needed(first) <= limits.max_size - len(
                world.nodes
            ):
                assert plan.create or plan.undrain, (cycle, first, plan)
        for name in plan.delete:
            node = world.nodes[name]
            assert node.state == NodeState.DRAINING and not node.running, (name, node)
            del world.nodes[name]
        for name in plan.drain:
            node = world.nodes[name]
            assert node.state in (NodeState.READY, NodeState.PROVISIONING)
            if limits.size is None:  # the autoscaler drains only what stayed idle
                assert node.state == NodeState.READY
                assert node.idle_since is not None and now - node.idle_since >= limits.idle_seconds
            node.state = NodeState.DRAINING
        for name in plan.undrain:
            world.nodes[name].state = NodeState.READY
        for _ in range(plan.create):
            world.nodes[f"n{world.made}"] = Node(NodeState.PROVISIONING, now + world.delay, None)
            world.made += 1
        # maxSize bounds every node the pool holds, drained ones included
        assert len(world.nodes) <= limits.max_size or not plan.create
    # Every job that a pool of maxSize can hold ran its whole duration: nothing was killed.
    limits = auto
    for job in jobs:
        if nodes_needed(job) <= limits.max_size:
            assert job.name in world.finished, (job, world.pending)
            assert world.finished[job.name] - world.started[job.name] == job.runs * CYCLE
    # Idle nodes went once the threshold passed: only minSize is left.
    assert len(world.nodes) == limits.min_size, world.nodes
