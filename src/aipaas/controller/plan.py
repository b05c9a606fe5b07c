"""What step 4 of a cycle (admit) decided, as a value the controller carries out (act).

``admission.place`` returns a ``Plan``; ``Controller`` then fails the jobs it names, queues its
stops (sent after the write-back, fenced), and carries out its starts: the records of every
start made durable in one fenced transaction (``prepare_starts`` here makes them), and only
then the backend asked (``Controller.start_task``). Nothing in admission.py or batch_cycle.py
writes a task record to the store or calls the backend.

Who calls it: controller/admission.py and batch_cycle.py build it; controller/cycle.py carries
it out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from aipaas.api.devices import AllocationResult
from aipaas.api.job import Job
from aipaas.controller.batch_snapshot import job_key
from aipaas.controller.launch import log_path
from aipaas.controller.lifecycle import Event, Facts, Stop, apply
from aipaas.controller.placement import Slot
from aipaas.controller.work import ACTIVE, JobWork
from aipaas.scheduler.batch.model import Start
from aipaas.store import TaskRecord

#: persists the claims' allocations of one placed task (ClaimBook.record_allocated)
RecordAllocated = Callable[[Job, str, Mapping[str, AllocationResult]], None]


@dataclass
class Plan:
    """Step 4's decisions, carried out by the controller in this order: failures, stops,
    starts."""

    #: the session's starts to carry out now, by job, each with the slot it was given
    starts: list[tuple[JobWork, list[tuple[Start, Slot]]]] = field(default_factory=list)
    #: keys of the jobs the session saw without task records (their records are made now)
    fresh: frozenset[str] = frozenset()
    #: attempts to stop (evictions, tasks that cannot be held where they ran)
    stops: list[Stop] = field(default_factory=list)
    #: jobs to end Failed, with reason and message (a dependency that failed)
    failures: list[tuple[JobWork, str, str]] = field(default_factory=list)


@dataclass
class PreparedStarts:
    """The records of a plan's starts, made but not yet stored."""

    #: jobs whose records are new (inserted; the others' changed records are updated)
    fresh: list[JobWork]
    #: each started task's record, Starting under its request id
    placed: list[tuple[JobWork, TaskRecord]]
    #: jobs that start their first task in this cycle (their Scheduled event)
    admitted: list[JobWork]


def prepare_starts(
    plan: Plan, log_dir: Path, record_allocated: RecordAllocated, now: datetime
) -> PreparedStarts:
    """Each start's record, Starting on its slot under a new request id (a task that ran
    before gets a new attempt: lifecycle.py ``PLACED``); a fresh job's records made first."""
    prepared = PreparedStarts([], [], [])
    for item, starts in plan.starts:
        if not any(r.phase in ACTIVE for r in item.records):
            prepared.admitted.append(item)
        if job_key(item.job) in plan.fresh and not item.records:
            item.records = new_records(log_dir, item.job)
            item.touched = True
            prepared.fresh.append(item)
        for start, slot in starts:
            record_allocated(item.job, start.task, slot.allocations)
            record = next((r for r in item.records if r.name == start.task), None)
            if record is None:
                continue
            record = apply(record, Event.PLACED, Facts(now, slot=slot)).record
            item.set(record)
            prepared.placed.append((item, record))
    return prepared


def scheduled(prepared: PreparedStarts, now: datetime) -> list[tuple[JobWork, float]]:
    """Mark each admitted job Scheduled (reason, message, event); the fresh ones with the
    seconds from their creation to now (the scheduling latency metric)."""
    fresh = {id(i) for i in prepared.fresh}
    latencies = []
    for item in prepared.admitted:
        placed = [r for i, r in prepared.placed if i is item]
        nodes = sorted({r.node for r in placed if r.node})
        item.reason = "Scheduled"
        item.message = f"{len(placed)} tasks placed on {', '.join(nodes)}"
        item.event("Scheduled", item.message)
        created = item.job.metadata.creation_timestamp
        if created and id(item) in fresh:
            latency = now - datetime.fromisoformat(created.replace("Z", "+00:00"))
            latencies.append((item, max(latency.total_seconds(), 0.0)))
    return latencies


def new_records(log_dir: Path, job: Job) -> list[TaskRecord]:
    """One record per replica, ranked in task order; not placed yet."""
    records = []
    rank = 0
    folder = str(Path(log_path(log_dir, job, "x")).parent)  # one path per job, not task
    for task in job.spec.tasks:
        for index in range(task.replicas):
            name = f"{task.name}-{index}"
            records.append(
                TaskRecord(
                    job_uid=job.metadata.uid or "",
                    tenant=job.tenant,
                    job_name=job.name,
                    name=name,
                    group_name=task.name,
                    index=index,
                    rank=rank,
                    log_path=f"{folder}/{name}.log",
                )
            )
            rank += 1
    return records
