"""The store on SQLite and PostgreSQL: CRUD, resourceVersion CAS, events, tokens, task records,
migrations."""

from __future__ import annotations

import threading

import pytest

from aipaas.api.job import Job, JobPhase, JobStatus
from aipaas.api.meta import ObjectMeta
from aipaas.api.queue import Queue, QueueSpec
from aipaas.api.registry import parse_object
from aipaas.api.tenancy import Tenant
from aipaas.errors import AlreadyExists, Conflict, NotFound
from aipaas.store import Store, TaskRecord, TaskRepository, tables
from aipaas.store.database import migrate
from aipaas.store.rows import parse as _parse


def make_job(name: str = "hello", tenant: str = "acme") -> Job:
    job = parse_object(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Job",
            "metadata": {"name": name, "tenant": tenant},
            "spec": {"queue": "research", "tasks": [{"name": "w", "command": ["true"]}]},
        }
    )
    assert isinstance(job, Job)
    return job


class TestObjects:
    def test_create_sets_identity(self, store: Store) -> None:
        created = store.create(make_job())
        assert created.metadata.uid
        assert created.metadata.resource_version == "1"
        assert created.metadata.creation_timestamp
        got = store.get("Job", "acme", "hello")
        assert got.metadata.uid == created.metadata.uid
        assert got.to_wire()["spec"] == created.to_wire()["spec"]

    def test_duplicate_is_already_exists(self, store: Store) -> None:
        store.create(make_job())
        with pytest.raises(AlreadyExists, match="job hello already exists"):
            store.create(make_job())

    def test_same_name_in_two_tenants(self, store: Store) -> None:
        store.create(make_job(tenant="acme"))
        store.create(make_job(tenant="globex"))
        assert len(store.list_objects("Job", None)) == 2
        assert [j.tenant for j in store.list_objects("Job", "globex")] == ["globex"]

    def test_missing_is_not_found(self, store: Store) -> None:
        with pytest.raises(NotFound, match="job nope not found"):
            store.get("Job", "acme", "nope")

    def test_stale_update_is_conflict(self, store: Store) -> None:
        queue = Queue(metadata=ObjectMeta(name="q", tenant="acme"), spec=QueueSpec(weight=1))
        store.create(queue)
        first = store.update(
            queue.model_copy(update={"spec": QueueSpec(weight=2)}), expected_version="1"
        )
        assert first.metadata.resource_version == "2"
        assert first.metadata.generation == 2
        with pytest.raises(Conflict, match="resourceVersion is 2, not 1"):
            store.update(
                queue.model_copy(update={"spec": QueueSpec(weight=3)}), expected_version="1"
            )
        got = store.get("Queue", "acme", "q")
        assert isinstance(got, Queue) and got.spec.weight == 2

    def test_status_is_a_separate_path(self, store: Store) -> None:
        job = store.create(make_job())
        store.update_status(job, JobStatus(phase=JobPhase.RUNNING))
        got = store.get("Job", "acme", "hello")
        assert isinstance(got, Job) and got.status is not None
        assert got.status.phase is JobPhase.RUNNING
        assert store.list_objects("Job", None, phases=["Running"])[0].name == "hello"
        assert store.list_objects("Job", None, exclude_phases=["Running"]) == []
        assert store.count_by_phase("Job") == {"Running": 1}
        # A spec update keeps the status the controller wrote.
        store.update(got)
        again = store.get("Job", "acme", "hello")
        assert isinstance(again, Job) and again.status is not None
        assert again.status.phase is JobPhase.RUNNING

    def test_delete(self, store: Store) -> None:
        store.create(Tenant(metadata=ObjectMeta(name="acme")))
        store.delete("Tenant", "", "acme")
        with pytest.raises(NotFound):
            store.delete("Tenant", "", "acme")

    def test_concurrent_creates_lose_nothing(self, store: Store) -> None:
        errors: list[Exception] = []

        def submit(worker: int) -> None:
            try:
                for index in range(20):
                    store.create(make_job(f"j-{worker}-{index}"))
            except Exception as err:
                errors.append(err)

        threads = [threading.Thread(target=submit, args=(w,)) for w in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert store.count("Job") == 160


class TestEventsTokensTasks:
    def test_events_in_order(self, store: Store) -> None:
        job = store.create(make_job())
        store.record_event(job, "Created", "made")
        store.record_event(job, "Failed", "broke", warning=True)
        events = store.list_events(kind="Job", name="hello")
        assert [(e.reason, e.type) for e in events] == [
            ("Created", "Normal"),
            ("Failed", "Warning"),
        ]
        assert store.list_events(tenant="globex") == []

    def test_task_records_round_trip(self, store: Store) -> None:
        tasks = TaskRepository(store)
        record = TaskRecord(
            job_uid="u1",
            tenant="acme",
            job_name="hello",
            name="w-0",
            group_name="w",
            index=0,
            rank=0,
            node="n1",
            gpus=(0, 3),
            gpu_milli=1000,
            phase="Running",
            request_id="u1.w-0.0",
        )
        tasks.insert_many(
            [record, record.with_(name="w-1", rank=1, index=1, node=None, gpus=(), phase="Pending")]
        )
        assert [r.name for r in tasks.for_job("u1")] == ["w-0", "w-1"]
        assert [r.gpus for r in tasks.active()] == [(0, 3)]
        tasks.save(record.with_(phase="Succeeded", exit_code=0))
        assert tasks.for_job("u1")[0].exit_code == 0
        tasks.delete_job("u1")
        assert tasks.for_job("u1") == []

    def test_records_of_unfinished_jobs_only(self, store: Store) -> None:
        tasks = TaskRepository(store)
        running, done = store.create(make_job("running")), store.create(make_job("done"))
        with store.transaction() as tx:
            store.write_status(done, JobStatus(phase=JobPhase.SUCCEEDED), conn=tx)
        for job in (running, done):
            uid = job.metadata.uid or ""
            tasks.insert_many(
                [TaskRecord(uid, "acme", job.name, f"w-{rank}", "w", rank, rank) for rank in (1, 0)]
            )
        tasks.insert_many([TaskRecord("no-such-job", "acme", "gone", "w-0", "w", 0, 0)])
        found = tasks.of_jobs_not_in(["Succeeded", "Failed", "Cancelled"])
        assert list(found) == [running.metadata.uid]
        assert [r.name for r in found[running.metadata.uid or ""]] == ["w-0", "w-1"]


def test_a_task_record_copy_changes_only_what_it_names() -> None:
    record = TaskRecord("u1", "acme", "hello", "w-0", "w", 0, 0)
    running = record.with_(phase="Running", gpus=(1, 2))
    assert running == TaskRecord(
        "u1", "acme", "hello", "w-0", "w", 0, 0, phase="Running", gpus=(1, 2)
    )
    assert record.phase == "Pending" and record.gpus == ()
    with pytest.raises(TypeError, match="no field nope"):
        record.with_(nope=1)


def test_migrations_are_idempotent(store: Store) -> None:
    migrate(store.engine)
    migrate(store.engine)
    assert store.count("Job") == 0


def test_find_each_returns_only_what_exists(store: Store) -> None:
    store.create(Tenant(metadata=ObjectMeta(name="acme")))
    store.create(make_job("a"))
    with store.transaction(write=False) as tx:
        found = store.find_each(
            [("Job", "acme", "a"), ("Tenant", "", "acme"), ("Queue", "acme", "nope")], conn=tx
        )
        assert set(found) == {("Job", "acme", "a"), ("Tenant", "", "acme")}
        assert found[("Job", "acme", "a")].name == "a"
        assert store.find_each([("Job", "globex", "a")], conn=tx) == {}


class TestWriteStatuses:
    def test_the_written_object_reads_back_as_stored(self, store: Store) -> None:
        created = store.create(make_job("a"))
        with store.transaction() as tx:
            store.write_statuses([(created, JobStatus(phase=JobPhase.RUNNING))], conn=tx)
        got = store.get("Job", "acme", "a")
        assert got.metadata.resource_version == "2"
        assert isinstance(got, Job) and got.status is not None
        assert got.status.phase is JobPhase.RUNNING
        with store.transaction(write=False) as tx:
            row = tx.execute(tables.objects.select()).mappings().one()
        assert _parse(row) == got  # what was remembered equals what a fresh parse gives

    def test_a_row_changed_since_it_was_read_still_gets_its_status(self, store: Store) -> None:
        created = store.create(make_job("a"))
        annotated = created.model_copy(
            update={"metadata": created.metadata.model_copy(update={"annotations": {"k": "v"}})}
        )
        store.update(annotated, expected_version="1")  # the API wrote in between: version 2
        with store.transaction() as tx:
            store.write_statuses([(created, JobStatus(phase=JobPhase.RUNNING))], conn=tx)
        got = store.get("Job", "acme", "a")
        assert isinstance(got, Job) and got.status is not None
        assert got.status.phase is JobPhase.RUNNING
        assert got.metadata.annotations == {"k": "v"}
        assert got.metadata.resource_version == "3"
