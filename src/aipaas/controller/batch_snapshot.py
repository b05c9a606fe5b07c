"""The batch session's snapshot, built from one controller cycle (step 4).

What holds resources and may be evicted: the tasks whose placement the cycle held on a ready
node (running, starting, or waiting on their node to restart). What holds resources but may
not be evicted: attempts asked to stop and not yet confirmed stopped (they keep their GPUs until
the backend confirms, at most once), tasks on nodes whose state is unknown, tasks of jobs that
are ending. Those go into one pseudo job per job (key ``tenant/name#held``, not preemptible,
nothing pending): they count against quotas and shares, and no action can take them.

What is pending: jobs that passed their dependencies with no records yet (every replica), and
replicas of admitted jobs that hold nothing (elastic extras, evicted tasks once their stop is
confirmed, restarts whose backoff passed and whose node no longer holds them).

One pass over the cycle's jobs and records (linear); pods are built with their DRA claims
(``ClaimBook.pod``), and a task counts what it really takes (GPUs of claims included: a running
task's from its record, a pending one's once the session chose its devices,
``Task.counts_claimed_gpus``). The admission inputs (the queue tree with budgets' holds, users'
quotas, each job's user) and the session's jobs come from scheduler/batch/from_api.py, as
``aipaas simulate``'s do: the snapshot holds everything a start is checked against, and no
check follows the session.

Who calls it: controller/batch_cycle.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from aipaas.api.job import Job as ApiJob
from aipaas.api.job import TaskPhase
from aipaas.controller.claims import ClaimBook
from aipaas.controller.placement import Pod, fit_request, pod_request
from aipaas.controller.work import FINISHED_TASK, JobWork
from aipaas.metering.usage import aware
from aipaas.scheduler.batch.from_api import gpu_memory_mib, job_user, session_job
from aipaas.scheduler.batch.model import Job, Resources, Snapshot, Task
from aipaas.scheduler.framework.types import Placement, PodRequest
from aipaas.store import TaskRecord

HELD_SUFFIX = "#held"


@dataclass
class Built:
    """The snapshot and what the controller needs to carry the decisions out."""

    snapshot: Snapshot
    #: job key -> its cycle item
    items: dict[str, JobWork] = field(default_factory=dict)
    #: (job key, task name) -> the pod the session placed or may place
    pods: dict[tuple[str, str], Pod] = field(default_factory=dict)
    #: keys of the jobs without records yet (their records are made when they start)
    fresh: set[str] = field(default_factory=set)
    #: names of the pods whose job asks for simulated nodes (the on-request pool)
    on_request: set[str] = field(default_factory=set)
    #: job key -> why it cannot be scheduled at all (its tenant or queue is missing)
    missing: dict[str, str] = field(default_factory=dict)


def job_key(job: ApiJob) -> str:
    return f"{job.tenant}/{job.name}"


def epoch(moment: datetime | None, default: float) -> float:
    """Epoch seconds of a stored time (SQLite gives naive datetimes back: they are UTC)."""
    return aware(moment).timestamp() if moment is not None else default


@dataclass
class Template:
    """A job without records as the session sees it, kept across sessions while it waits: a
    backlog of ten thousand pending jobs cost most of a session's snapshot otherwise."""

    #: (resource version, whether gpu: compiles to a claim) it was made for
    version: tuple[str | None, bool]
    #: its replicas: (name, pod, request, counted)
    entries: list[tuple[str, Pod, PodRequest, Resources]]
    #: the session's job made of them: used again while no session placed any of its tasks
    #: (a start the controller refused leaves them placed in the session's objects)
    job: Job | None = None


#: per job uid, the job's ``Template``; a pending job costs nothing the next time
Templates = dict[str, Template]


def build(
    claims: ClaimBook,
    work: Sequence[JobWork],
    eligible: set[int],
    held: Mapping[tuple[str, str], Placement],
    base: Snapshot,
    templates: Templates,
) -> Built:
    """The snapshot of the cycle: ``base`` (``from_api.session_snapshot``: nodes, the queue
    tree, users' quotas) with the cycle's jobs. ``eligible``: ids of the items that may start
    tasks; ``held``: (job uid, task) -> placement held for tasks that may be evicted;
    ``templates``: kept across cycles (jobs no longer pending are dropped from it)."""
    built = Built(base)
    queues, users, now = base.queues, base.users, base.now
    pending_uids: set[str] = set()
    for order, item in enumerate(work):
        api = item.job
        facts = item.facts  # read once per job version (work.py)
        key = facts.path
        uid = facts.uid
        queue = facts.queue_path
        may_start = id(item) in eligible
        if may_start and (facts.tenant not in queues or queue not in queues):
            what = f"tenant {api.tenant}" if api.tenant not in queues else f"queue {api.spec.queue}"
            built.missing[key] = f"{what} does not exist"
            may_start = False
        built.items[key] = item
        simulated = facts.simulated
        user = job_user(api, users)
        tasks: list[Task] = []
        kept: list[Task] = []  # held, not evictable
        if not item.records:
            if may_start:
                pending_uids.add(uid)
                built.fresh.add(key)
                template = _template(claims, api, templates)
                for name, pod, _, _ in template.entries:
                    built.pods[(key, name)] = pod
                    if simulated:
                        built.on_request.add(pod.name)
                job = template.job
                if job is not None and _untouched(job, key, queue, user):
                    job.order = order
                else:
                    tasks = [
                        Task(
                            name=name,
                            request=request,
                            counted=counted,
                            fit=fit_request(pod),
                            counts_claimed_gpus=_claims_count(pod),
                        )
                        for name, pod, request, counted in template.entries
                    ]
                    job = template.job = _job(api, key, queue, tasks, order, now, user)
                built.snapshot.jobs.append(job)
            continue
        records = item.records
        memory = {t.name: gpu_memory_mib(t) for t in api.spec.tasks}
        # No replica is placed while an attempt of the job may still run: a gang evicted
        # whole starts again whole, once every stop is confirmed.
        placing = may_start and not any(r.stopping for r in records)
        for record in records:
            holds = record.node is not None and (
                record.phase not in FINISHED_TASK or record.stopping
            )
            if holds:
                pod = claims.pod(api, record)
                counted = _counted(pod, record.gpus, memory.get(record.group_name, 0))
                placement = held.get((uid, record.name))
                # A task with DRA claims owns their devices in the ledger (Placer.hold_placement):
                # releasing its placement frees them, as it frees counted GPUs.
                evictable = placement is not None and not record.stopping and may_start
                task = Task(
                    name=record.name,
                    request=pod_request(pod),
                    placement=placement or _placeholder(pod, record),
                    since=epoch(record.started_at, now),
                    counted=counted,
                    device_gpus=record.gpus if pod.claims else (),
                )
                (tasks if evictable else kept).append(task)
                continue
            if not placing or not _placeable(record, now):
                continue
            pod = claims.pod(api, record)
            built.pods[(key, record.name)] = pod
            if simulated:
                built.on_request.add(pod.name)
            tasks.append(
                Task(
                    name=record.name,
                    request=pod_request(pod),
                    counted=_counted(pod, (), memory.get(record.group_name, 0)),
                    fit=fit_request(pod),
                    counts_claimed_gpus=_claims_count(pod),
                )
            )
        if tasks:
            built.snapshot.jobs.append(_job(api, key, queue, tasks, order, now, user))
        if kept:
            held_job = _job(api, key + HELD_SUFFIX, queue, kept, order, now, user)
            held_job.preemptible = False
            held_job.min_available = len(kept)
            built.snapshot.jobs.append(held_job)
    for uid in [u for u in templates if u not in pending_uids]:
        del templates[uid]
    return built


def _untouched(job: Job, key: str, queue: str, user: str) -> bool:
    """A kept session job that no session placed (its tasks as built), of the same name,
    queue and user with a quota."""
    return (
        job.key == key
        and job.queue == queue
        and job.user == user
        and job.started is None
        and all(t.placement is None and t.since is None for t in job.tasks)
    )


def _template(claims: ClaimBook, api: ApiJob, templates: Templates) -> Template:
    """The replicas of a job without records (kept while the job and the claims' path stay)."""
    uid = api.metadata.uid or ""
    version = (api.metadata.resource_version, claims.gpu_devices)  # as JobFacts.version
    known = templates.get(uid)
    if known is not None and known.version == version:
        return known
    entries = []
    for spec in api.spec.tasks:
        memory = gpu_memory_mib(spec)
        for index in range(spec.replicas):
            name = f"{spec.name}-{index}"
            record = TaskRecord(uid, api.tenant, api.name, name, spec.name, index, 0)
            pod = claims.pod(api, record)
            entries.append((name, pod, pod_request(pod), _counted(pod, (), memory)))
    template = Template(version, entries)
    # Stored claims may change, and the class serving an extended resource: built each time.
    if not any(spec.resources.claims or spec.resources.extended for spec in api.spec.tasks):
        templates[uid] = template
    return template


def _claims_count(pod: Pod) -> bool:
    """The whole GPUs of the pod's explicit DRA claims count against quotas (the ``gpu:``
    short form's are in its resources already)."""
    return bool(pod.claims) and not pod.gpu_claim


def _placeable(record: TaskRecord, now: float) -> bool:
    """A replica that holds nothing and may be placed now."""
    return (
        record.phase == TaskPhase.PENDING.value
        and not record.stopping
        and (record.restart_after is None or epoch(record.restart_after, now) <= now)
    )


def _counted(pod: Pod, gpus: tuple[int, ...], gpu_memory: int) -> Resources:
    """What the task counts against quotas (as admission always counted it): its resources,
    and the whole GPUs its explicit DRA claims were given."""
    usage = pod.amounts.total() + Resources(gpu_memory_mib=gpu_memory)
    # ``gpus`` (a placed task's) also lists those it asked by count, in its resources already
    claimed = len(gpus) - pod.amounts.gpu_count
    if pod.claims and not pod.gpu_claim and claimed > 0:
        usage += Resources(gpu_milli=1000 * claimed)
    return usage


def _placeholder(pod: Pod, record: TaskRecord) -> Placement:
    """The placement of a task the session must not release (it is held in the Placer, or its
    node is not in it): never given to the engine."""
    return Placement(
        pod=pod.name,
        node=record.node or "",
        node_index=-1,
        gpus=record.gpus,
        gpu_milli=record.gpu_milli,
        cpu_milli=pod.amounts.cpu_milli,
        memory_mib=pod.amounts.memory_mib,
    )


def _job(
    api: ApiJob, key: str, queue: str, tasks: list[Task], order: int, now: float, user: str
) -> Job:
    created = api.metadata.creation_timestamp
    submitted = now
    if created:
        try:
            submitted = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
        except ValueError:
            submitted = now
    return session_job(
        api, key=key, queue=queue, tasks=tasks, order=order, submitted=submitted, user=user
    )


def is_held(key: str) -> bool:
    return key.endswith(HELD_SUFFIX)
