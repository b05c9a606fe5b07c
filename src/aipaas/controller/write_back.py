"""Step 5 of a controller cycle: write back what the cycle decided, and publish metrics.

Task records, job status (only where it changed) and events go to the store in one
transaction; a finished job whose deletion was requested is deleted with its records.

Who calls it: ``Controller.run_cycle`` (controller/cycle.py). It writes the store; it never
calls a backend.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from aipaas.api.job import Job, JobPhase, JobStatus
from aipaas.clock import Clock, isoformat
from aipaas.controller.placement import Placer
from aipaas.controller.work import JobWork, job_status, status_events, status_unchanged
from aipaas.metering.metrics import Metrics
from aipaas.metering.usage import record_attempts
from aipaas.store import Connection, Store, TaskRepository

DELETE_ANNOTATION = "aipaas.dev/delete-requested"

log = logging.getLogger("aipaas.controller")

#: told, after the commit, the uids of the jobs whose task records or status the cycle wrote
#: (the log followers of the same process wake on it); called from the controller's thread
OnWritten = Callable[[Sequence[str]], None]


def write_back(
    store: Store,
    tasks: TaskRepository,
    clock: Clock,
    work: list[JobWork],
    *,
    transaction: Callable[[], AbstractContextManager[Connection]] | None = None,
    on_written: OnWritten | None = None,
    also: Callable[[Connection], None] | None = None,
    verified: set[tuple[str, str]] | None = None,
) -> None:
    """Task records, job status and events of the cycle, in one transaction: ``transaction``
    (the controller's fenced one: refused when the lease was lost), else a plain one; then
    ``on_written`` with the uids of the jobs it changed (none: not called). ``also`` writes
    more in the same transaction.

    ``verified``: (uid, resourceVersion) of the jobs whose stored status was found (or written)
    to match their records by the last write-back; such a job that nothing touched in this
    cycle keeps its status unchecked (most jobs, most cycles). Updated for the next cycle."""
    statuses: list[tuple[Job, JobStatus]] = []
    seen: set[tuple[str, str]] = set()
    events: list[tuple[Job, str, str, bool]] = []
    deleted: list[Job] = []
    now = isoformat(clock.now())
    for item in work:
        key = item.facts.key
        if (
            verified is not None
            and key in verified
            and item.facts.has_status
            and not item.touched
            and item.phase is None
            and not item.events
            and (not item.reason or _same_reason(item))
        ):
            seen.add(key)
            continue
        if item.job.status is not None and status_unchanged(item):
            status = item.job.status
            seen.add(key)
        else:
            status = job_status(item, now)
            if (item.job.status.model_dump(mode="json") if item.job.status else None) != (
                status.model_dump(mode="json")
            ):
                statuses.append((item.job, status))
                status_events(item, status)
                # written below: the job's next version holds this status
                seen.add((key[0], str(int(key[1] or 0) + 1)))
            else:
                seen.add(key)
        events.extend((item.job, *event) for event in item.events)
        if DELETE_ANNOTATION in item.job.metadata.annotations and status.phase.finished:
            deleted.append(item.job)
    changed = [r for item in work if item.changed for r in item.records if r.name in item.changed]
    with (transaction or store.transaction)() as tx:
        tasks.save_many(changed, conn=tx)
        # usage ledger (E): the jobs of the records saved here are those it may look up
        record_attempts(store, tx, changed, (item.job for item in work if item.changed))
        for item in work:
            if item.changed:
                item.changed.clear()
        store.write_statuses(statuses, conn=tx)
        store.record_events(events, conn=tx)
        if also is not None:
            also(tx)  # the queues' status (controller/queue_status.py)
        for job in deleted:
            tasks.delete_job(job.metadata.uid or "", conn=tx)
            store.delete("Job", job.tenant, job.name, conn=tx)
    if verified is not None:
        verified.clear()
        verified.update(seen)
    if on_written is None:
        return
    uids = {r.job_uid for r in changed}
    uids.update(job.metadata.uid or "" for job, _ in statuses)
    uids.update(job.metadata.uid or "" for job in deleted)
    uids.discard("")
    if uids:
        try:
            on_written(sorted(uids))
        except Exception:  # the cycle is written; a listener's failure must not undo it
            log.exception("telling the listener of the written jobs failed")


def _same_reason(item: JobWork) -> bool:
    """Whether the reason the cycle gave a verified, untouched job is the one stored: its
    records are those its stored status was made of, so the status would come out the same
    (a running job shows Running whatever its waiting extras say: left to the full check)."""
    old = item.job.status
    return (
        old is not None
        and old.phase is not JobPhase.RUNNING
        and old.reason == item.reason
        and old.message == item.message
    )


def publish_metrics(
    metrics: Metrics, store: Store, work: list[JobWork], placer: Placer, *, pending: bool = True
) -> None:
    """Jobs per phase (from the store), pending jobs per queue (unless ``pending`` is False: the
    caller knows the cycle's jobs are those it last published), GPUs in total and allocated."""
    counts = dict.fromkeys((p.value for p in JobPhase), 0)
    for phase, count in store.count_by_phase("Job").items():
        counts[phase or JobPhase.PENDING.value] += count
    for phase, count in counts.items():
        metrics.jobs.labels(phase=phase).set(count)
    if pending:
        metrics.set_pending(
            (item.facts.tenant, item.facts.queue) for item in work if item.facts.pending
        )
    metrics.gpus_total.set(placer.gpus_total)
    metrics.gpus_allocated.set(placer.gpus_allocated)
