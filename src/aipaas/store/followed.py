"""The one read that serves every log follower of a process: the followed jobs' phases and
task records, in one transaction however many followers there are."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select

from aipaas.store import tables
from aipaas.store.store import Store
from aipaas.store.tasks import TaskRecord, TaskRepository


@dataclass(frozen=True)
class FollowedJob:
    phase: str  # "" until the controller writes a status
    tasks: list[TaskRecord]


def followed_jobs(store: Store, job_uids: Sequence[str]) -> dict[str, FollowedJob]:
    """The jobs of ``job_uids`` that still exist, by uid."""
    objects = tables.objects
    query = select(objects.c.uid, objects.c.phase).where(
        objects.c.kind == "Job", objects.c.uid.in_(list(job_uids))
    )
    with store.transaction(write=False) as tx:
        phases = {str(uid): str(phase) for uid, phase in tx.execute(query).all()}
        tasks = TaskRepository(store).for_jobs(list(phases), conn=tx) if phases else {}
    return {uid: FollowedJob(phase, tasks.get(uid, [])) for uid, phase in phases.items()}
