"""What a job's gang asks for, worked out once per waiting job: ``gang_tasks`` (the pending
tasks that must start together), ``gang_entry`` (with what they ask for), the shapes and keys
by which jobs alike are told apart (``gang_kind``, ``gang_shape``, ``verdict_shape``: shared
objects, compared by identity), and plain-int sums of requests (``job_total``,
``resources_of``). A session asks them of every waiting job every cycle; they are kept on a
job none of whose tasks runs (requests do not change)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar, cast

from aipaas.scheduler.batch.model import Job, Resources, Task

_T = TypeVar("_T")


def gang_tasks(job: Job) -> list[Task]:
    """The pending tasks that must start together for the job to run: enough of them to reach
    ``min_available`` (the first ones by index); none for a job already at its gang."""
    running = 0
    pending = []
    for task in job.tasks:
        if task.placement is None:
            pending.append(task)
        else:
            running += 1
    needed = job.min_available - running
    return pending[:needed] if needed > 0 else []


def gang_entry(job: Job) -> tuple[list[Task], Resources] | None:
    """``gang_tasks(job)`` and what they ask for together (None: no gang to start). Kept on
    a job none of whose tasks runs (then its gang is its first ``min_available`` tasks):
    requests do not change, and a waiting job is asked again every cycle."""
    tasks = job.tasks
    idle = tasks[0].placement is None if len(tasks) == 1 else not job.is_running
    if not idle:
        gang = gang_tasks(job)
        return (gang, resources_of(gang)) if gang else None
    cached = job._idle_gang
    if cached is None or cached[0] != job.min_available:
        gang = gang_tasks(job)
        want = resources_of(gang)
        shapes = _shapes(gang)
        verdict = _intern(_verdict_shape(gang))
        # The user is part of the kind: jobs of two users with quotas do not fare alike.
        kind = None if shapes is None else _intern((want.as_tuple(), shapes, verdict, job.user))
        cached = job._idle_gang = (job.min_available, (gang, want), shapes, verdict, kind)
    return cached[1] if cached[1][0] else None


def gang_kind(job: Job) -> object | None:
    """For a job none of whose tasks runs: one shared object per (gang request, request
    shapes, enqueue's verdict key), so that jobs alike are told by identity (a backlog is
    compared job by job); None for a job with device claims or not worked out yet."""
    cached = job._idle_gang
    return cached[4] if cached is not None and cached[0] == job.min_available else None


#: shared immutable keys (``gang_kind``, verdict shapes): equal ones are one object
_INTERNED: dict[object, object] = {}
_INTERNED_MAX = 100_000


def _intern(value: _T) -> _T:
    found = _INTERNED.get(value)
    if found is None:
        if len(_INTERNED) >= _INTERNED_MAX:
            return value  # equal keys then compare by value only where asked (never wrong)
        _INTERNED[value] = found = value
    return cast(_T, found)


def gang_shape(job: Job, gang: Sequence[Task]) -> tuple[object, ...] | None:
    """What the requests of ``gang`` (the job's ``gang_tasks``) look like: per task its
    request's shape, memory and GPU memory (None when a task has device claims: devices are
    chosen by claim, not by shape). Kept on a job none of whose tasks runs."""
    cached = job._idle_gang
    if cached is not None and cached[1][0] is gang:
        return cached[2]
    return _shapes(gang)


def verdict_shape(job: Job, gang: Sequence[Task]) -> tuple[object, ...]:
    """Per task of ``gang``: its name and its request's CPU, GPU (milli and count), GPU
    models and memory (what enqueue's verdicts are kept by); equal ones are one object (while
    fewer than ``_INTERNED_MAX`` are known). Kept on a job none of whose tasks runs."""
    cached = job._idle_gang
    if cached is not None and cached[1][0] is gang:
        return cached[3]
    return _intern(_verdict_shape(gang))


def _verdict_shape(gang: Sequence[Task]) -> tuple[object, ...]:
    if len(gang) == 1:  # most of a backlog: no generator
        t = gang[0]
        r = t.request
        return (t.name, *r.fit_key)
    return tuple((t.name, *r.fit_key) for t in gang for r in (t.request,))


def _shapes(gang: Sequence[Task]) -> tuple[object, ...] | None:
    if any(t.request.claims for t in gang):
        return None
    return tuple((t.request.fit_key, t.gpu_memory_mib) for t in gang)


def job_total(job: Job) -> tuple[int, int, int, int]:
    """What all the job's tasks ask for together (gpu milli, cpu milli, memory MiB, GPU
    memory MiB), worked out once per job."""
    total = job._total
    if total is None:
        r = resources_of(job.tasks)
        total = job._total = (r.gpu_milli, r.cpu_milli, r.memory_mib, r.gpu_memory_mib)
    return total


def resources_of(tasks: Sequence[Task]) -> Resources:
    """What ``tasks`` ask for together (``Task.resources`` summed in plain ints, read from the
    request directly: backlogs are long and a Resources per task is the cost)."""
    gpu = cpu = memory = gpu_memory = 0
    for task in tasks:
        counted = task.counted
        if counted is not None:
            gpu += counted.gpu_milli
            cpu += counted.cpu_milli
            memory += counted.memory_mib
            gpu_memory += counted.gpu_memory_mib
        else:
            request = task.request
            gpu += request.gpu_count * request.gpu_milli
            cpu += request.cpu_milli
            memory += request.memory_mib
            gpu_memory += task.gpu_memory_mib
    return Resources(gpu, cpu, memory, gpu_memory)
