"""Reclaim does not take a job for an excess its branch borrowed in the same cycle: the case
Hypothesis found in test_reclaim_from_shared_gpus_properties.py (a reclaim loop), written out.

Four nodes of one GPU; tenants t0, t1, t2 (one queue each, equal weights, no guarantees), the
default profile's whole cycle, twice, the first cycle's decisions applied before the second.
"""

from __future__ import annotations

import copy

from aipaas.scheduler.batch.cluster import SnapshotCluster
from aipaas.scheduler.batch.model import NO_LIMIT, Decisions, Job, Node, QueueNode, Snapshot, Task
from aipaas.scheduler.batch.run import run_session
from aipaas.scheduler.framework.profile import load_profile
from aipaas.scheduler.framework.types import PodRequest

PROFILE = load_profile("default")
NOW = 1000.0

#: (tenant, priority, GPU milli of its one task, node it runs on or None: waiting)
JOBS = [
    ("t0", 0, 250, "n0"),
    ("t0", 0, 250, "n0"),
    ("t0", 0, 250, "n2"),
    ("t0", 0, 250, "n2"),
    ("t2", 0, 250, "n2"),
    ("t2", 100, 250, "n2"),
    ("t0", 0, 250, None),
    ("t0", 0, 500, "n1"),
    ("t1", 100, 1000, None),
    ("t2", 100, 1000, None),
]


def world() -> tuple[list[Node], dict[str, QueueNode], list[Job]]:
    nodes = [Node(f"n{i}", 1, 64_000, 256 * 1024) for i in range(4)]
    queues: dict[str, QueueNode] = {"": QueueNode("", None, "", quota=NO_LIMIT)}
    for i, tenant in enumerate(("t0", "t1", "t2")):
        queues[tenant] = QueueNode(tenant, "", tenant, created=2 * i)
        queues[f"{tenant}/q"] = QueueNode(f"{tenant}/q", tenant, tenant, created=2 * i + 1)
    engine = SnapshotCluster(nodes, PROFILE)
    jobs = []
    for order, (tenant, priority, milli, where) in enumerate(JOBS):
        request = PodRequest(f"j{order}-w-0", 1000, 1024, 1, milli)
        job = Job(
            key=f"{tenant}/j{order}",
            tenant=tenant,
            queue=f"{tenant}/q",
            tasks=[Task("w-0", request)],
            priority=priority,
            preemptible=True,
            submitted=float(order),
            order=order,
        )
        if where is not None:
            placed = engine.place([request], {where})
            assert isinstance(placed, list), placed
            job.tasks[0].placement, job.tasks[0].since = placed[0], 0.0
            job.started = 0.0
        jobs.append(job)
    return nodes, queues, jobs


def cycle(nodes: list[Node], queues: dict[str, QueueNode], jobs: list[Job]) -> Decisions:
    """One cycle on a copy of ``jobs``; its evictions and starts then applied to ``jobs``."""
    engine = SnapshotCluster(nodes, PROFILE)
    for job in jobs:
        for task in job.running_tasks:
            assert task.placement is not None
            engine.hold(task.placement)
    decisions = run_session(
        Snapshot(NOW, nodes, queues, copy.deepcopy(jobs)), engine, PROFILE.spec.batch
    )
    by_key = {job.key: job for job in jobs}
    for eviction in decisions.evicted:
        task = next(t for t in by_key[eviction.job].tasks if t.name == eviction.task)
        task.placement, task.since = None, None
        if not by_key[eviction.job].is_running:
            by_key[eviction.job].started = None
    for start in decisions.started:
        job = by_key[start.job]
        task = next(t for t in job.tasks if t.name == start.task)
        task.placement, task.since = start.placement, NOW
        job.started = NOW if job.started is None else job.started
    return decisions


def test_a_branch_over_its_share_only_by_what_it_borrowed_loses_nothing_to_reclaim() -> None:
    """First cycle: t2/j9 (priority 100, a whole GPU) preempts its own t2/j4 and takes
    t0/j7's half GPU from n1 (reclaim from shared GPUs) and starts there: t2 then holds
    t2/j5 and t2/j9, 1.25 GPUs, its fair share. Second cycle: t2/j4 (0.25 GPU) borrows the
    idle quarter of n0, so t2 holds 1.5 GPUs, 0.25 above its share, all of it borrowed in
    this cycle (t2/j4 cannot be taken in the cycle it started). Taking t2/j9 for that excess
    would leave t2 at 0.5 GPUs, below its share, and give t0/j7 back the room it lost: a
    loop. So t0/j7 takes nothing and keeps waiting; t2/j9 keeps running."""
    nodes, queues, jobs = world()
    first = cycle(nodes, queues, jobs)
    assert {(e.job, e.by) for e in first.evicted} == {("t2/j4", "t2/j9"), ("t0/j7", "t2/j9")}
    assert {s.job: s.placement.node for s in first.started}["t2/j9"] == "n1"
    assert first.queues["t2"].fair_share.gpu_milli == 1250
    assert first.queues["t2"].allocated.gpu_milli == 1250

    second = cycle(nodes, queues, jobs)
    assert {s.job: s.placement.node for s in second.started}.get("t2/j4") == "n0"
    assert second.evicted == []
    running = {job.key for job in jobs if job.is_running}
    assert "t2/j9" in running
    assert "t0/j7" not in running
