"""The enqueue action: only jobs whose gang could ever start enter consideration.

A gang (the first ``min_available`` tasks) larger than a quota of its queue or of any ancestor,
larger than the whole cluster, with a task no node could ever hold, or larger than every
domain of its required topology level, waits with the reason in words and numbers; later
actions do not look at it (Volcano's enqueue, Kueue's admission check against nominal quota).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.explain import capacity_message, describe, over_quota_message
from aipaas.scheduler.batch.model import UNBOUNDED, Job, Node, Resources, Task
from aipaas.scheduler.batch.session import gang_shape, verdict_shape
from aipaas.scheduler.batch.topology import ever_fits, level_name
from aipaas.scheduler.framework.types import PodRequest

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session


def enqueue(session: Session) -> None:
    admitted: set[str] = set()
    capacity = session.capacity
    nodes = list(session.engine.nodes)
    room = Resources(capacity.gpu_milli, capacity.cpu_milli, capacity.memory_mib, UNBOUNDED)
    # Backlogs repeat themselves: the verdict is the same for the same queue, gang and level.
    verdicts: dict[tuple[object, ...], tuple[str, str] | None] = {}
    gangs = session.pending_gangs()
    refused = 0
    walked: Iterable[Job] = session.jobs.values()
    book = session.book
    if book is not None and not session.account_log:
        # The backlog by groups (one leaf, priority, level and gang kind: one verdict key),
        # as the caller keeps it: one look per group, then the rest of the jobs one by one.
        waiting = session.waiting
        stopped = session.stopped
        for (queue, _, label, _, _), group in book.groups.items():
            members = group.members
            first = group.jobs[0]
            if stopped and first.key in stopped:
                continue  # a held leaf (a group is one leaf): it starts nothing this cycle
            tasks, gang = book.entries[first.key]
            shape = verdict_shape(first, tasks)
            key = (queue, label, id(shape))
            if key in verdicts:
                problem = verdicts[key]
            else:
                problem = verdicts[key] = _verdict(session, first, tasks, gang, nodes, room)
            if problem is None:
                admitted.update(members)
            else:
                refused += len(members)
                waiting.update(dict.fromkeys(members, problem))
        walked = book.others.values()
    for job in walked:
        entry = gangs.get(job.key)
        if entry is None:
            if job.pending_tasks:
                admitted.add(job.key)  # a running job: its elastic extras may start
            continue
        tasks, gang = entry
        cached = job._idle_gang
        if cached is not None and cached[1] is entry:  # a waiting job seen before: no calls
            shape, claims = cached[3], cached[2] is None
        else:
            shape, claims = verdict_shape(job, tasks), gang_shape(job, tasks) is None
        # Verdict shapes are shared objects: told apart by identity (no hashing of them).
        key = (job.queue, job.topology_required, id(shape))
        if not claims and key in verdicts:  # device claims are judged one by one
            problem = verdicts[key]
        else:
            problem = verdicts[key] = _verdict(session, job, tasks, gang, nodes, room)
        if problem is None:
            admitted.add(job.key)
        else:
            refused += 1
            session.wait(job, *problem)
    session.enqueued = admitted
    session.memos.refused = refused


def _verdict(
    session: Session,
    job: Job,
    tasks: list[Task],
    gang: Resources,
    nodes: list[Node],
    room: Resources,
) -> tuple[str, str] | None:
    problem = _never_fits(session, job, tasks, gang, nodes)
    if problem is None and not gang.fits_within(room):
        problem = ("Unschedulable", capacity_message(gang, session.capacity))
    return problem


def _never_fits(
    session: Session, job: Job, tasks: list[Task], gang: Resources, nodes: list[Node]
) -> tuple[str, str] | None:
    if job.queue not in session.queues:
        return ("Unschedulable", f"its queue {job.queue} does not exist")
    for key in session.lineage(job.queue):
        queue = session.queues.get(key)
        if key == "" or queue is None:
            continue
        if not gang.fits_within(queue.quota):
            return ("QuotaExceeded", over_quota_message(key, queue, gang, len(tasks)))
    for task in tasks:
        if not _fits_some_node(session, task.request, nodes):
            return (
                "Unschedulable",
                f"task {task.name} needs {describe(task.resources)} on one node; no node of "
                "the cluster is that large",
            )
    label = job.topology_required
    if label is not None and not ever_fits(nodes, label, gang):
        level = level_name(label)
        return (
            "Topology",
            f"its gang needs {describe(gang)} inside one {level}; no {level} is that large",
        )
    return None


def _fits_some_node(session: Session, pod: PodRequest, nodes: list[Node]) -> bool:
    """Some node could hold ``pod``; remembered per pod shape (backlogs repeat shapes)."""
    cache = session.memos.fits
    shape = pod.fit_key
    fits = cache.get(shape)
    if fits is None:
        fits = cache[shape] = any(_node_holds(node, pod) for node in nodes)
    return fits


def _node_holds(node: Node, pod: PodRequest) -> bool:
    """An empty ``node`` could run ``pod`` (GPU count and model, CPU, memory)."""
    if pod.gpu_count and (
        node.gpu_count < pod.gpu_count or (pod.gpu_models and node.gpu_model not in pod.gpu_models)
    ):
        return False
    return pod.cpu_milli <= node.cpu_milli and pod.memory_mib <= node.memory_mib
