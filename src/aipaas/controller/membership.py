"""Elastic jobs (minAvailable below the replicas): who runs now, told to the tasks.

A task of an elastic job starts with WORLD_SIZE set to the job's size at its start (the tasks
starting or running then, itself included; controller/launch.py) and AIPAAS_MEMBERSHIP_FILE
naming a JSON file ``{"size": n, "members": [{"rank", "name", "node"}]}`` that the controller
keeps up to date as tasks start, end or are evicted. The backend writes the file
(``MembershipFiles``, backends/base.py) where the job's tasks can read it; a backend without
that capability gets no file and tasks see WORLD_SIZE only.

Written when it changes (the last payload per job is kept), before a new member is started
(so it reads a file that names it) and after each cycle's write-back.

Who calls it: controller/cycle.py (``start_task`` and the end of ``run_cycle``), with its
backend and the payloads last written (``BatchState.membership``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from aipaas.api.job import Job
from aipaas.backends.base import Backend, membership_files
from aipaas.controller.work import ACTIVE, JobWork
from aipaas.store import TaskRecord

log = logging.getLogger("aipaas.controller")


def is_elastic(job: Job) -> bool:
    return job.spec.min_available is not None and job.spec.min_available < (job.spec.total_replicas)


def job_dir(job: Job) -> str:
    """The job's unique name among its tenant's (as its log directory)."""
    return f"{job.name}-{(job.metadata.uid or '')[:8]}"


def members(records: Iterable[TaskRecord]) -> list[TaskRecord]:
    """The tasks that count as members: starting or running, not asked to stop."""
    return sorted(
        (r for r in records if r.phase in ACTIVE and not r.stopping), key=lambda r: r.rank
    )


def payload(records: Iterable[TaskRecord]) -> dict[str, object]:
    current = members(records)
    return {
        "size": len(current),
        "members": [{"rank": r.rank, "name": r.name, "node": r.node or ""} for r in current],
    }


def file_for(engine: Backend, job: Job, node: str | None) -> str | None:
    """The membership file a task of ``job`` on ``node`` reads (None: none)."""
    backend = membership_files(engine)
    if backend is None or not is_elastic(job) or node is None:
        return None
    return backend.membership_file(node, job.tenant, job_dir(job))


def sync(engine: Backend, written: dict[str, str], item: JobWork) -> None:
    """Write the job's membership if it changed since it was last written (``written``: the
    last payload per job uid, updated here)."""
    backend = membership_files(engine)
    job = item.job
    if backend is None or not is_elastic(job):
        return
    uid = job.metadata.uid or ""
    text = json.dumps(payload(item.records), sort_keys=True)
    if written.get(uid) == text:
        return
    try:
        backend.update_membership(job.tenant, job_dir(job), json.loads(text))
    except Exception as err:  # tasks read the last one written; tried again next cycle
        log.warning("membership of job %s not written: %s", job.name, err)
        return
    written[uid] = text


def sync_all(engine: Backend, written: dict[str, str], work: Iterable[JobWork]) -> None:
    """After the write-back: the membership of every elastic job whose records changed in this
    cycle (a membership changes only with them); jobs no longer listed are forgotten."""
    remembering = bool(written)  # else nothing to forget: the uids need not be gathered
    listed = set()
    for item in work:
        if remembering:
            listed.add(item.job.metadata.uid or "")
        if not item.touched or not is_elastic(item.job):
            continue
        listed.add(item.job.metadata.uid or "")
        if item.phase is not None and item.phase.finished:
            continue
        sync(engine, written, item)
    for uid in [u for u in written if u not in listed]:
        del written[uid]
