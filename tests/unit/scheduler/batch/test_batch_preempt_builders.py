"""Builders for the preempt and reclaim tests: a cluster, a queue tree and jobs in a few lines,
running tasks held in a SnapshotCluster on the nodes named, and one action run over it.

Every job asks whole GPUs (1 core, 1 GiB per task unless told); times are seconds, and the
cycle runs at ``NOW`` unless told."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from aipaas.scheduler.batch.cluster import SnapshotCluster
from aipaas.scheduler.batch.model import (
    NO_LIMIT,
    Decisions,
    Job,
    Node,
    QueueNode,
    Resources,
    Snapshot,
    Task,
)
from aipaas.scheduler.batch.session import Session
from aipaas.scheduler.framework.types import PodRequest

NOW = 1000.0
GIB = 1024


def gpus(n: float) -> Resources:
    return Resources(gpu_milli=int(n * 1000))


def gpu_quota(n: int) -> Resources:
    """A quota of ``n`` GPUs, no bound on the rest."""
    return Resources(n * 1000, NO_LIMIT.cpu_milli, NO_LIMIT.memory_mib, NO_LIMIT.gpu_memory_mib)


def node(name: str, gpu: int = 8, **labels: str) -> Node:
    return Node(
        name,
        gpu,
        64_000,
        512 * GIB,
        "gpu",
        {f"topology.aipaas.dev/{k}": v for k, v in labels.items()},
    )


@dataclass
class World:
    """What one test builds: nodes, the queue tree (root first), jobs and where they run."""

    nodes: list[Node]
    queues: dict[str, QueueNode] = field(default_factory=lambda: {"": QueueNode("", None, "")})
    jobs: list[Job] = field(default_factory=list)
    #: job key -> (node per running task, in task order; since per task)
    running: dict[str, tuple[list[str], list[float]]] = field(default_factory=dict)

    def queue(
        self,
        key: str,
        *,
        quota: Resources = NO_LIMIT,
        guaranteed: Resources | None = None,
        min_runtime: float = 0.0,
    ) -> World:
        """A tenant ("t") or a queue ("t/q"; "t/q/sub" below "t/q")."""
        parent = "" if "/" not in key else key.rsplit("/", 1)[0]
        self.queues[key] = QueueNode(
            key,
            parent,
            key.split("/")[0],
            guaranteed=guaranteed or Resources(),
            quota=quota,
            created=len(self.queues),
            min_runtime=min_runtime,
        )
        return self

    def job(
        self,
        key: str,
        queue: str,
        *,
        tasks: int = 1,
        gpu: int = 1,
        cpu: int = 1,
        priority: int = 0,
        preemptible: bool = True,
        min_available: int | None = None,
        on: Sequence[str] = (),
        since: float | Sequence[float] = 0.0,
        required: str | None = None,
    ) -> World:
        """A job of ``tasks`` replicas "w-i" asking ``gpu`` whole GPUs each; its first
        ``len(on)`` tasks run on the nodes named, since ``since`` (one time or one per task)."""
        name = key.split("/", 1)[1]
        order = len(self.jobs) + 1
        job = Job(
            key,
            key.split("/")[0],
            queue,
            [
                Task(
                    f"w-{i}", PodRequest(f"{name}-w-{i}", cpu * 1000, GIB, gpu, 1000 if gpu else 0)
                )
                for i in range(tasks)
            ],
            priority=priority,
            preemptible=preemptible,
            min_available=tasks if min_available is None else min_available,
            submitted=float(order),
            order=order,
            topology_required=None if required is None else f"topology.aipaas.dev/{required}",
        )
        self.jobs.append(job)
        if on:
            times = [float(since)] * len(on) if isinstance(since, int | float) else list(since)
            self.running[key] = (list(on), times)
        return self

    def session(
        self, fair_share: Mapping[str, Resources] | None = None, now: float = NOW
    ) -> Session:
        engine = SnapshotCluster(self.nodes, "bestfit")
        for key, (where, times) in self.running.items():
            target = next(j for j in self.jobs if j.key == key)
            for task, name, since in zip(target.tasks, where, times, strict=False):
                placed = engine.place([task.request], nodes=[name])
                assert isinstance(placed, list), placed
                task.placement = placed[0]
                task.since = since
            target.started = min(times)
        session = Session(Snapshot(now, list(self.nodes), self.queues, list(self.jobs)), engine)
        session.fair_share = dict(fair_share or {})
        return session


def run(action: Callable[[Session], None], session: Session) -> Decisions:
    action(session)
    return session.decisions


def evicted(decisions: Decisions) -> list[str]:
    """'job/task' of every eviction, in order."""
    return [f"{e.job}/{e.task}" for e in decisions.evicted]


def started(decisions: Decisions) -> list[str]:
    return [f"{s.job}/{s.task}" for s in decisions.started]


def nodes_of(decisions: Decisions, job_key: str) -> dict[str, str]:
    return {s.task: s.placement.node for s in decisions.started if s.job == job_key}


def consistent(session: Session) -> None:
    """What the session holds per queue equals what its jobs run, and the engine's free GPU
    equals capacity minus what runs: the statement left no trace behind."""
    held: dict[str, Resources] = {}
    for job in session.jobs.values():
        used = job.allocated()
        for key in session.lineage(job.queue):
            held[key] = held.get(key, Resources()) + used
    for key in session.queues:
        assert session.allocated[key] == held.get(key, Resources()), key
    free = sum(session.engine.free(n.name).gpu_milli for n in session.engine.nodes)
    assert free == session.capacity.gpu_milli - held.get("", Resources()).gpu_milli
