"""Properties of a batch cycle over random queue trees, clusters and job mixes (issue 11).

Each example builds a tree (tenants, queues, sometimes sub-queues) whose guarantees fit in the
cluster, a cluster of whole-GPU nodes, and jobs (gangs, elastic jobs, priorities, preemptible or
not), some already running since random times; then runs cycles of the default profile through
``run_session`` and applies the decisions as a runner would (a start takes its placement, an
eviction sends the task back to pending). Checked after every cycle:

* no queue node holds more than its quota;
* every gang is whole: a job runs at least ``min_available`` tasks or none;
* no job younger than its queue's ``min_runtime`` is evicted, and no non-preemptible one;
* no preemption loop: if a job of queue A evicted a job of queue B, in the next cycle (nothing
  else changed) no job of B evicts one of A (within one queue: the evicted job does not evict
  its evictor);
* a leaf queue with pending work below its guarantee, whose jobs fit in what the guarantee has
  left, reaches it within two cycles (checked on mixes where every running job may be reclaimed:
  preemptible, one task, no minimum runtime).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aipaas.scheduler.batch.cluster import SnapshotCluster
from aipaas.scheduler.batch.model import (
    NO_LIMIT,
    UNBOUNDED,
    Decisions,
    Job,
    Node,
    QueueNode,
    Resources,
    Snapshot,
    Task,
)
from aipaas.scheduler.batch.run import run_session
from aipaas.scheduler.framework.profile import load_profile
from aipaas.scheduler.framework.types import PodRequest

PROFILE = load_profile("default")
GPU = 1000
NODE_GPUS = 8
NOW = 1000.0
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@dataclass
class World:
    """The state a runner keeps between cycles."""

    nodes: list[Node]
    queues: dict[str, QueueNode]
    jobs: list[Job]
    now: float = NOW

    def cycle(self) -> Decisions:
        """One cycle on a copy of the state, then the decisions applied to the state itself."""
        jobs = copy.deepcopy(self.jobs)
        engine = SnapshotCluster(self.nodes, PROFILE)
        for job in jobs:
            for task in job.running_tasks:
                assert task.placement is not None
                engine.hold(task.placement)
        decisions = run_session(
            Snapshot(self.now, self.nodes, self.queues, jobs), engine, PROFILE.spec.batch
        )
        by_key = {job.key: job for job in self.jobs}
        for eviction in decisions.evicted:
            job = by_key[eviction.job]
            task = next(t for t in job.tasks if t.name == eviction.task)
            assert task.placement is not None, f"{eviction.job}/{eviction.task} evicted twice"
            task.placement, task.since = None, None
            if not job.is_running:
                job.started = None
        for start in decisions.started:
            job = by_key[start.job]
            task = next(t for t in job.tasks if t.name == start.task)
            assert task.placement is None, f"{start.job}/{start.task} started twice"
            task.placement, task.since = start.placement, self.now
            if job.started is None:
                job.started = self.now
        return decisions

    def __repr__(self) -> str:
        """Compact, for hypothesis' failing examples: GPUs guaranteed/quota per queue node,
        jobs as key@queue tasks x GPUs (min, priority, preemptible, running since)."""
        queues = ", ".join(
            f"{k or '<root>'}={q.guaranteed.gpu_milli // GPU}/"
            f"{'-' if q.quota.gpu_milli >= UNBOUNDED else q.quota.gpu_milli // GPU}"
            f"{f' min_runtime={q.min_runtime:g}' if q.min_runtime else ''}"
            for k, q in self.queues.items()
        )
        jobs = "; ".join(
            f"{j.key}@{j.queue} {len(j.tasks)}x{j.tasks[0].request.gpu_count} "
            f"min={j.min_available} "
            f"p={j.priority}{'' if j.preemptible else ' np'} running={len(j.running_tasks)}"
            f"{'' if j.started is None else f' since={j.started:g}'}"
            for j in self.jobs
        )
        return f"World(now={self.now:g}, nodes={len(self.nodes)}x{NODE_GPUS}, {queues}; {jobs})"

    def lineage(self, key: str) -> list[str]:
        out: list[str] = []
        current: str | None = key
        while current is not None:
            out.append(current)
            current = self.queues[current].parent
        return out

    def held(self) -> dict[str, Resources]:
        held: dict[str, Resources] = {key: Resources() for key in self.queues}
        for job in self.jobs:
            for key in self.lineage(job.queue):
                held[key] = held[key] + job.allocated()
        return held


# --- strategies ------------------------------------------------------------------------------


def _gpus(count: int) -> Resources:
    """A guarantee of ``count`` GPUs (nothing else guaranteed)."""
    return Resources(gpu_milli=count * GPU)


def _quota(count: int) -> Resources:
    """A quota of ``count`` GPUs, no bound on the other resources."""
    return Resources(count * GPU, UNBOUNDED, UNBOUNDED, UNBOUNDED)


@st.composite
def worlds(draw: st.DrawFn, reclaimable: bool = False) -> World:
    """A tree whose guarantees add up to at most the cluster, nodes of 8 GPUs, and jobs; with
    ``reclaimable`` every job is preemptible, has one task and no minimum runtime applies."""
    node_count = draw(st.integers(1, 3))
    nodes = [
        Node(f"n{i}", NODE_GPUS, 64_000, 512 * 1024, labels={"rack": f"r{i % 2}"})
        for i in range(node_count)
    ]
    capacity = node_count * NODE_GPUS
    queues: dict[str, QueueNode] = {"": QueueNode("", None, "", quota=NO_LIMIT)}
    leaves: list[str] = []
    created = 0
    left = capacity  # guarantees not handed out yet (GPUs)
    for t in range(draw(st.integers(1, 3))):
        tenant = f"t{t}"
        children = draw(st.lists(st.integers(0, 2), min_size=1, max_size=3))  # sub-queue counts
        plans: list[tuple[str, str, int]] = []  # (key, parent, guarantee)
        for q, subs in enumerate(children):
            parent_key = f"{tenant}/q{q}"
            if subs:
                plans += [
                    (f"{parent_key}-{s}", parent_key, draw(st.integers(0, 3))) for s in range(subs)
                ]
            else:
                plans.append((parent_key, tenant, draw(st.integers(0, 4))))
        wanted = sum(g for _, _, g in plans)
        scale = min(1.0, left / wanted) if wanted else 1.0
        guarantees = {key: int(g * scale) for key, _, g in plans}
        left -= sum(guarantees.values())
        tenant_guarantee = sum(guarantees.values())
        tenant_quota = tenant_guarantee + draw(st.integers(0, capacity))
        queues[tenant] = QueueNode(
            tenant, "", tenant, _gpus(tenant_guarantee), _quota(tenant_quota), created=created
        )
        created += 1
        for q, subs in enumerate(children):
            parent_key = f"{tenant}/q{q}"
            if subs:
                mine = sum(g for key, g in guarantees.items() if key.startswith(parent_key + "-"))
                queues[parent_key] = QueueNode(
                    parent_key,
                    tenant,
                    tenant,
                    _gpus(mine),
                    _quota(mine + draw(st.integers(0, 16))),
                    created=created,
                )
                created += 1
        for key, parent, _ in plans:
            guarantee = guarantees[key]
            queues[key] = QueueNode(
                key,
                parent,
                tenant,
                _gpus(guarantee),
                _quota(guarantee + draw(st.integers(0, 16))),
                weight=draw(st.sampled_from([1.0, 2.0])),
                created=created,
                min_runtime=0.0 if reclaimable else draw(st.sampled_from([0.0, 100.0, 2000.0])),
            )
            created += 1
            leaves.append(key)
    world = World(nodes, queues, [])
    engine = SnapshotCluster(nodes, PROFILE)
    for order in range(draw(st.integers(1, 16))):
        leaf = draw(st.sampled_from(leaves))
        tenant = queues[leaf].tenant
        tasks = 1 if reclaimable else draw(st.integers(1, 3))
        # One GPU per task when every job may be reclaimed: any free GPU then fits it, so
        # "its jobs fit" does not depend on fragmentation.
        size = 1 if reclaimable else draw(st.sampled_from([1, 1, 2, 4]))
        minimum = draw(st.integers(1, tasks))
        job = Job(
            key=f"{tenant}/j{order}",
            tenant=tenant,
            queue=leaf,
            tasks=[
                Task(f"w-{i}", PodRequest(f"j{order}-w-{i}", 1000, 1024, size, GPU))
                for i in range(tasks)
            ],
            priority=draw(st.sampled_from([0, 10, 20])),
            preemptible=True if reclaimable else draw(st.booleans()),
            min_available=minimum,
            submitted=float(order),
            order=order,
        )
        world.jobs.append(job)
        if draw(st.booleans()):
            _start_if_room(world, engine, job, since=draw(st.sampled_from([0.0, 500.0, 990.0])))
    return world


def _start_if_room(world: World, engine: SnapshotCluster, job: Job, since: float) -> None:
    """Start the job's gang now (before the first cycle) if it fits in the nodes and quotas."""
    gang = job.tasks[: job.min_available]
    held = world.held()
    need = job.gang_request()
    if any(
        not (held[k] + need).fits_within(world.queues[k].quota) for k in world.lineage(job.queue)
    ):
        return
    placed = engine.place([t.request for t in gang])
    if isinstance(placed, list):
        for task, placement in zip(gang, placed, strict=True):
            task.placement, task.since = placement, since
        job.started = since


# --- the checks --------------------------------------------------------------------------------


def _check_state(world: World) -> None:
    held = world.held()
    for key, queue in world.queues.items():
        assert held[key].fits_within(queue.quota), (
            f"{key} holds {held[key]} over quota {queue.quota}"
        )
    for job in world.jobs:
        running = len(job.running_tasks)
        assert running == 0 or running >= job.min_available, (
            f"{job.key} runs {running} tasks, below its minAvailable {job.min_available}"
        )


def _check_evictions(before: dict[str, Job], decisions: Decisions, world: World) -> None:
    for eviction in decisions.evicted:
        victim = before[eviction.job]
        assert victim.preemptible, f"non-preemptible {victim.key} evicted"
        assert victim.started is not None
        age = world.now - victim.started
        floor = world.queues[victim.queue].min_runtime
        assert age >= floor, f"{victim.key} evicted at age {age}s under minRuntime {floor}s"


def _loops(first: Decisions, second: Decisions, queue_of: dict[str, str]) -> list[str]:
    """Evictions of the second cycle that reverse one of the first."""
    earlier = {(e.by, e.job) for e in first.evicted}
    earlier_queues = {(queue_of[e.by], queue_of[e.job]) for e in first.evicted}
    loops = []
    for e in second.evicted:
        same_queue = queue_of[e.by] == queue_of[e.job]
        if (e.job, e.by) in earlier or (
            not same_queue and (queue_of[e.job], queue_of[e.by]) in earlier_queues
        ):
            loops.append(f"{e.by} evicts {e.job} after the reverse")
    return loops


@SETTINGS
@given(worlds())
def test_quota_gangs_min_runtime_and_no_loops(world: World) -> None:
    _check_state(world)
    queue_of = {job.key: job.queue for job in world.jobs}
    previous: Decisions | None = None
    for _ in range(3):
        before = {job.key: copy.deepcopy(job) for job in world.jobs}
        decisions = world.cycle()
        _check_evictions(before, decisions, world)
        _check_state(world)
        if previous is not None:
            assert not _loops(previous, decisions, queue_of)
        previous = decisions
        world.now += 1.0


def _fits_in_guarantee(world: World, leaf: str) -> list[str]:
    """Pending jobs of ``leaf`` whose gang fits in what its guarantee (of GPUs: nothing else is
    guaranteed) has left."""
    held = world.held()[leaf].gpu_milli
    guarantee = world.queues[leaf].guaranteed.gpu_milli
    return [
        job.key
        for job in world.jobs
        if job.queue == leaf
        and not job.is_running
        and held + job.gang_request().gpu_milli <= guarantee
    ]


@SETTINGS
@given(worlds(reclaimable=True))
def test_a_queue_below_its_guarantee_reaches_it_within_two_cycles(world: World) -> None:
    leaves = [
        k
        for k in world.queues
        if k.count("/") and not any(q.parent == k for q in world.queues.values())
    ]
    for _ in range(2):
        world.cycle()
        world.now += 1.0
    for leaf in leaves:
        fitting = _fits_in_guarantee(world, leaf)
        assert not fitting, (
            f"{leaf} holds {world.held()[leaf].gpu_milli / GPU:g} of its guaranteed "
            f"{world.queues[leaf].guaranteed.gpu_milli / GPU:g} GPUs after two cycles; "
            f"{fitting} would fit"
        )
