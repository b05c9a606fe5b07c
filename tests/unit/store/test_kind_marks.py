"""A kind's mark (store.py ``kind_marks``) changes with every write to one of its objects,
whatever path wrote it, and with no write to another kind."""

from __future__ import annotations

from aipaas.api.job import Job, JobPhase, JobStatus
from aipaas.api.registry import load_objects
from aipaas.store import Store

JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, tenant: acme}}
spec:
  queue: research
  tasks: [{{name: w, command: [train], resources: {{cpu: 1}}}}]
"""
QUEUE = "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: research, tenant: acme}\n"


def _job(store: Store, name: str) -> Job:
    job = store.create(load_objects(JOB.format(name=name))[0])
    assert isinstance(job, Job)
    return job


def test_every_write_to_a_job_changes_the_mark_of_jobs_only(store: Store) -> None:
    assert store.kind_marks(["Job", "Queue"]) == {}  # no object: no mark
    store.create(load_objects(QUEUE)[0])
    queue_mark = store.kind_marks(["Queue"])["Queue"]
    marks = []

    def mark() -> tuple[object, ...]:
        found = store.kind_marks(["Job", "Queue"])
        assert found["Queue"] == queue_mark
        marks.append(found["Job"])
        return found["Job"]

    job = _job(store, "a")
    mark()
    _job(store, "b")
    mark()
    written = store.update_status(job, JobStatus(phase=JobPhase.PENDING, reason="Waiting"))
    mark()
    with store.transaction() as tx:
        store.write_statuses([(written, JobStatus(phase=JobPhase.RUNNING))], conn=tx)
    mark()
    with store.transaction() as tx:
        store.write_status(job, JobStatus(phase=JobPhase.SUCCEEDED), conn=tx)
    mark()
    edited = store.get("Job", "acme", "b")
    store.update(
        edited.model_copy(
            update={"metadata": edited.metadata.model_copy(update={"annotations": {"x": "y"}})}
        )
    )
    mark()
    store.delete("Job", "acme", "b")
    mark()
    assert mark() == marks[-2]  # no write: the same mark
    assert len(set(marks)) == len(marks) - 1


def test_a_job_deleted_and_another_created_changes_the_mark(store: Store) -> None:
    _job(store, "a")
    _job(store, "b")
    before = store.kind_marks(["Job"])["Job"]
    store.delete("Job", "acme", "b")  # the newest: its row id may be taken again
    _job(store, "b")
    assert store.kind_marks(["Job"])["Job"] != before
