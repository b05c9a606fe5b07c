"""The rules of Jobs and Queues when the API writes them (server/submission.py holds the pure
checks these call): a job's queue, priority class, dependencies and data must exist, its spec
never changes after submission, and deleting an unfinished job asks the controller to stop it;
a queue's parent must fit the queue tree.

Registered in server/strategies/__init__.py; called by ObjectService (server/service.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aipaas.api.job import CANCEL_ANNOTATION, Job, JobSpec, JobStatus
from aipaas.api.meta import Object
from aipaas.api.priority import PriorityClass
from aipaas.api.queue import Queue
from aipaas.api.tenancy import Tenant
from aipaas.clock import isoformat
from aipaas.errors import Conflict, FieldError, InvalidObject
from aipaas.metering.usage import SUBMITTER_ANNOTATION
from aipaas.server.data_checks import check_job_data, job_data_keys
from aipaas.server.strategies.base import (
    KindStrategy,
    Writer,
    annotate,
    check_tenant_exists,
    keys_to_find,
)
from aipaas.server.submission import (
    check_dependencies,
    check_leaf_queue,
    check_queue_parent,
    priority_class_keys,
    resolve_priority,
)
from aipaas.store import Connection, TaskRepository
from aipaas.store.queue_tree import child_queues, unfinished_jobs_in
from aipaas.store.store import ObjectKey

DELETE_ANNOTATION = "aipaas.dev/delete-requested"


class JobStrategy(KindStrategy[Job]):
    def reference_keys(self, obj: Job) -> list[ObjectKey]:
        """Its queue, its priority class and the jobs it depends on, then its data."""
        keys: list[ObjectKey] = [("Queue", obj.tenant, obj.spec.queue)]
        keys.extend(priority_class_keys(obj))
        keys.extend(("Job", obj.tenant, name) for name in obj.spec.depends_on)
        keys.extend(job_data_keys(obj))
        return keys

    def check_references(self, obj: Job, found: Mapping[ObjectKey, Object], writer: Writer) -> None:
        check_job_data(obj, found)  # server/data_checks.py
        check_tenant_exists(obj, found)
        tenant = found.get(("Tenant", "", obj.tenant))
        if isinstance(tenant, Tenant) and not tenant.spec.allow_gpu_selection:
            _check_no_gpu_named(obj)
        if ("Queue", obj.tenant, obj.spec.queue) not in found:
            raise InvalidObject(
                [
                    FieldError(
                        "spec.queue",
                        f"queue {obj.spec.queue} does not exist in tenant {obj.tenant}",
                    )
                ]
            )

    def resolve(
        self, obj: Job, found: Mapping[ObjectKey, Object], writer: Writer, tx: Connection
    ) -> Job:
        """The job with its priority class resolved (server/submission.py)."""
        spec = _resolved_spec(obj, found, writer, tx)
        return obj if spec is obj.spec else obj.model_copy(update={"spec": spec})

    def validate_create(self, obj: Job, writer: Writer, tx: Connection) -> None:
        """Its dependencies read in the transaction that stores it: a job it depends on that
        was applied before it (an earlier document of the same request) is there."""
        check_dependencies(obj, _jobs_named(writer, obj.tenant, tx))
        check_leaf_queue(obj, child_queues(tx, obj.tenant, obj.spec.queue, limit=4))

    def as_created(self, obj: Job, writer: Writer) -> Job:
        """A new job shows a phase from the start and who submitted it (for metering)."""
        annotations = {**obj.metadata.annotations, SUBMITTER_ANNOTATION: writer.caller.user}
        meta = obj.metadata.model_copy(update={"annotations": annotations})
        update: dict[str, Any] = {"metadata": meta, "status": JobStatus(reason="Submitted")}
        return obj.model_copy(update=update)

    def unchanged(self, current: Job, wanted: Job) -> bool:
        if same_job_spec(current, wanted):
            return True
        raise Conflict(
            f"job {wanted.name} already exists with another spec; a job cannot change after "
            "submission (delete it and submit again)"
        )

    def validate_update(self, obj: Job, current: Job, writer: Writer) -> Job:
        store = writer.store
        with store.transaction(write=False) as tx:
            found = store.find_each(keys_to_find(obj, self), conn=tx)
            obj = self.resolve(obj, found, writer, tx)
        if not same_job_spec(current, obj):
            raise Conflict(f"job {obj.name}: a job cannot change after submission")
        return obj

    def delete(self, obj: Job, writer: Writer) -> str:
        store, user = writer.store, writer.caller.user
        if obj.status is not None and obj.status.phase.finished:
            # Nothing runs: the job and its task records go now (its logs stay on disk).
            with store.transaction() as tx:
                TaskRepository(store).delete_job(obj.metadata.uid or "", conn=tx)
                store.delete("Job", obj.tenant, obj.name, conn=tx)
                store.record_event(obj, "Deleted", f"deleted by {user}", conn=tx)
            return f"job {obj.name} deleted"
        now = isoformat(store.clock.now())
        annotate(store, obj, {CANCEL_ANNOTATION: now, DELETE_ANNOTATION: now}, keep=True)
        store.record_event(obj, "DeleteRequested", f"deleted by {user}")
        return f"job {obj.name} deleting"


class QueueStrategy(KindStrategy[Queue]):
    def reference_keys(self, obj: Queue) -> list[ObjectKey]:
        return [] if obj.spec.parent is None else [("Queue", obj.tenant, obj.spec.parent)]

    def validate(self, obj: Queue, current: Queue | None, writer: Writer, tx: Connection) -> None:
        """The queue tree's rules for a queue's parent (server/submission.py)."""

        def queues_named(names: Sequence[str]) -> dict[str, Queue]:
            keys = [("Queue", obj.tenant, name) for name in names]
            found = writer.store.find_each(keys, conn=tx)
            return {q.name: q for q in found.values() if isinstance(q, Queue)}

        check_queue_parent(
            obj,
            current,
            queues_named,
            lambda name: unfinished_jobs_in(tx, obj.tenant, name, limit=4),
        )

    def validate_update(self, obj: Queue, current: Queue, writer: Writer) -> Queue:
        with writer.store.transaction(write=False) as tx:
            self.validate(obj, current, writer, tx)
        return obj


def same_job_spec(current: Object, wanted: Object) -> bool:
    """The stored job's spec is what the request resolves to. A job stored before the server
    resolved ``preemptible`` has none: the resolved one is not a change to it."""
    stored = current.to_wire().get("spec") or {}
    asked = wanted.to_wire().get("spec") or {}
    if "preemptible" not in stored:
        asked = {k: v for k, v in asked.items() if k != "preemptible"}
    return bool(stored == asked)


def _resolved_spec(
    job: Job, found: Mapping[ObjectKey, Object], writer: Writer, tx: Connection
) -> JobSpec:
    tenant = found.get(("Tenant", "", job.tenant))

    def priority_class(name: str) -> PriorityClass | None:
        key = ("PriorityClass", "", name)
        stored = found[key] if key in found else writer.store.find_each([key], conn=tx).get(key)
        return stored if isinstance(stored, PriorityClass) else None

    return resolve_priority(
        job,
        platform_admin=writer.caller.is_platform_admin,
        tenant=tenant if isinstance(tenant, Tenant) else None,
        classes=priority_class,
    )


def _check_no_gpu_named(job: Job) -> None:
    """A tenant whose platform admin forbids naming GPUs: no task names them."""
    for index, task in enumerate(job.spec.tasks):
        gpu = task.resources.gpu
        named = "uuids" if gpu is not None and gpu.uuids else "indices"
        if gpu is not None and (gpu.uuids or gpu.indices):
            raise InvalidObject(
                [
                    FieldError(
                        f"spec.tasks[{index}].resources.gpu.{named}",
                        f"tenant {job.tenant} may not name GPUs by UUID or index "
                        "(its Tenant's spec.allowGpuSelection is false)",
                    )
                ]
            )


def _jobs_named(
    writer: Writer, tenant: str, tx: Connection
) -> Callable[[Sequence[str]], dict[str, Job]]:
    def jobs_named(names: Sequence[str]) -> dict[str, Job]:
        found = writer.store.find_each([("Job", tenant, name) for name in names], conn=tx)
        return {job.name: job for job in found.values() if isinstance(job, Job)}

    return jobs_named
