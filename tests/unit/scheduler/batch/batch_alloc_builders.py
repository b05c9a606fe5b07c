"""Builders for the allocate and topology tests: a snapshot in a few lines, held in a
SnapshotCluster (running tasks placed on the nodes named), and the session run over it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
from aipaas.scheduler.batch.options import BatchOptions
from aipaas.scheduler.batch.session import Session
from aipaas.scheduler.framework.types import PodRequest

GIB = 1024


def gpus(n: float) -> Resources:
    return Resources(gpu_milli=int(n * 1000))


def gpu_quota(n: float) -> Resources:
    """A quota of ``n`` GPUs and no bound on anything else."""
    return Resources(int(n * 1000), UNBOUNDED, UNBOUNDED, UNBOUNDED)


def node(name: str, gpu: int = 8, cpu: int = 64, memory_gib: int = 512, **labels: str) -> Node:
    return Node(
        name,
        gpu,
        cpu * 1000,
        memory_gib * GIB,
        "gpu" if gpu else "",
        {f"topology.aipaas.dev/{k}": v for k, v in labels.items()},
    )


def queue(
    key: str,
    *,
    quota: Resources = NO_LIMIT,
    guaranteed: Resources | None = None,
    priority: int = 0,
    weight: float = 1.0,
) -> QueueNode:
    """A tenant ("t") or queue ("t/q", "t/q/sub" with parent "t/q") below the root."""
    parent = "" if "/" not in key else key.rsplit("/", 1)[0]
    return QueueNode(
        key,
        parent,
        key.split("/")[0],
        guaranteed=guaranteed or Resources(),
        quota=quota,
        weight=weight,
        priority=priority,
    )


def tree(*queues: QueueNode) -> dict[str, QueueNode]:
    """The root plus ``queues``, created in the order given."""
    out = {"": QueueNode("", None, "", created=0)}
    for index, q in enumerate(queues, start=1):
        out[q.key] = QueueNode(
            q.key,
            q.parent,
            q.tenant,
            guaranteed=q.guaranteed,
            quota=q.quota,
            weight=q.weight,
            priority=q.priority,
            created=index,
        )
    return out


_ORDER = [0]


def job(
    key: str,
    queue_key: str,
    *,
    tasks: int = 1,
    gpu: int = 1,
    cpu: int = 1,
    priority: int = 0,
    min_available: int | None = None,
    required: str | None = None,
    preferred: str | None = None,
) -> Job:
    """A job of ``tasks`` replicas "w-i", each asking ``gpu`` whole GPUs and ``cpu`` cores;
    submitted after every job built before it."""
    _ORDER[0] += 1
    name = key.split("/", 1)[1]
    return Job(
        key,
        key.split("/")[0],
        queue_key,
        [
            Task(f"w-{i}", PodRequest(f"{name}-w-{i}", cpu * 1000, GIB, gpu, 1000 if gpu else 0))
            for i in range(tasks)
        ],
        priority=priority,
        min_available=tasks if min_available is None else min_available,
        submitted=float(_ORDER[0]),
        order=_ORDER[0],
        topology_required=None if required is None else f"topology.aipaas.dev/{required}",
        topology_preferred=None if preferred is None else f"topology.aipaas.dev/{preferred}",
    )


def session(
    nodes: Sequence[Node],
    queues: dict[str, QueueNode],
    jobs: Sequence[Job],
    running: Mapping[str, Sequence[str]] | None = None,
    *,
    fair_share: Mapping[str, Resources] | None = None,
    options: BatchOptions | None = None,
) -> Session:
    """A session over the snapshot; ``running`` maps a job key to the node of each of its
    first tasks (they run since time 0). ``fair_share`` replaces the computed shares."""
    engine = SnapshotCluster(nodes, "bestfit")
    for key, where in (running or {}).items():
        target = next(j for j in jobs if j.key == key)
        for task, name in zip(target.tasks, where, strict=False):
            placed = engine.place([task.request], nodes=[name])
            assert isinstance(placed, list), placed
            task.placement = placed[0]
            task.since = 0.0
        target.started = 0.0
    return Session(
        Snapshot(100.0, list(nodes), queues, list(jobs)), engine, options, fair_share=fair_share
    )


def started(decisions: Decisions) -> dict[str, list[str]]:
    """Job -> tasks started (names), in the order started."""
    out: dict[str, list[str]] = {}
    for start in decisions.started:
        out.setdefault(start.job, []).append(start.task)
    return out


def nodes_of(decisions: Decisions, job_key: str) -> dict[str, str]:
    return {s.task: s.placement.node for s in decisions.started if s.job == job_key}
