"""What the API does with objects, for one caller: the rules between routes and the store.

Every call checks, in order: the kind exists; the caller may see the tenant (else 404); the
role allows the verb (else 403); the object is valid against its references (tenant, queue,
priority class, the jobs it depends on) and says only what its author may say (system labels
and annotations, priority numbers: server/submission.py), inside the transaction that stores it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection

from aipaas.api.data import Secret
from aipaas.api.finops import Invitation, PriceList
from aipaas.api.job import CANCEL_ANNOTATION, Job, JobPhase, JobSpec, JobStatus
from aipaas.api.meta import Object
from aipaas.api.priority import PriorityClass
from aipaas.api.queue import Queue
from aipaas.api.registry import KINDS, load_documents, parse_object
from aipaas.api.tenancy import Tenant, User
from aipaas.clock import isoformat
from aipaas.errors import Conflict, FieldError, Forbidden, InvalidObject, NotFound
from aipaas.metering.usage import SUBMITTER_ANNOTATION
from aipaas.server.data_checks import (
    check_data_references,
    data_reference_keys,
    keep_shown_values,
    redact_page,
    redact_secret,
    redact_secrets,
)
from aipaas.server.entry_apply import check_service, service_reference_keys
from aipaas.server.finops_checks import check_finops, finops_reference_keys
from aipaas.server.submission import (
    check_dependencies,
    check_leaf_queue,
    check_queue_parent,
    check_system_keys,
    priority_class_keys,
    resolve_priority,
)
from aipaas.store import Store, TaskRepository
from aipaas.store.paging import Page
from aipaas.store.queue_tree import child_queues, unfinished_jobs_in
from aipaas.store.store import ObjectKey
from aipaas.tenancy import users
from aipaas.tenancy.prices import prices_visible
from aipaas.tenancy.principal import Principal, Verb
from aipaas.tenancy.tenant_defaults import default_class_only

DELETE_ANNOTATION = "aipaas.dev/delete-requested"
READ_ONLY_KINDS = frozenset({"Node", "WebhookDelivery", "ServiceLoad"})
# Cluster-wide policy only a platform admin writes, whatever the role table says.
PLATFORM_ADMIN_KINDS = frozenset({"PriorityClass", "NodePool", "PriceList"})
# Writing these changes who a token is or what it may do: cached principals must go.
IDENTITY_KINDS = frozenset({"User", "Tenant"})


@dataclass(frozen=True)
class Applied:
    object: Object
    action: Literal["created", "configured", "unchanged"]


@dataclass(frozen=True)
class _Stored:
    """An object of the name exists: ``current``; ``wanted`` is the request as resolved."""

    current: Object
    wanted: Object


class ObjectService:
    def __init__(
        self,
        store: Store,
        caller: Principal,
        *,
        identity_changed: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.caller = caller
        self.identity_changed = identity_changed

    # reads --------------------------------------------------------------------------------

    def get(self, kind: str, name: str, tenant: str | None) -> Object:
        cls = KINDS[kind]
        if cls.namespaced and tenant is None and self.caller.is_platform_admin:
            return self._find_anywhere(kind, name)
        scope = self._scope(cls, tenant)
        if kind == "Tenant" and not self.caller.sees_tenant(name):
            raise NotFound(f"tenant {name} not found")
        found = self.store.get(kind, scope, name)
        if not self._sees_prices(found):
            raise NotFound(f"{kind.lower()} {name} not found")
        return redact_secret(found)

    def _sees_prices(self, obj: Object) -> bool:
        """A tenant's own (negotiated) price list is invisible to other tenants."""
        return not isinstance(obj, PriceList) or prices_visible(obj, self.caller)

    def _find_anywhere(self, kind: str, name: str) -> Object:
        """A platform admin who names no tenant: the one object of that name, if only one."""
        found = self.store.find_by_name(kind, name)
        if not found:
            raise NotFound(f"{kind.lower()} {name} not found")
        if len(found) > 1:
            tenants = ", ".join(sorted(obj.tenant for obj in found))
            raise InvalidObject(
                [
                    FieldError(
                        "tenant", f"{kind.lower()} {name} exists in tenants {tenants}: name one"
                    )
                ]
            )
        return redact_secret(found[0])

    def list_objects(self, kind: str, tenant: str | None) -> list[Object]:
        cls = KINDS[kind]
        if kind == "Tenant":
            items = self.store.list_objects("Tenant", "")
            return [t for t in items if self.caller.sees_tenant(t.name)]
        if not cls.namespaced:
            return [o for o in self.store.list_objects(kind, "") if self._sees_prices(o)]
        if tenant is None and self.caller.is_platform_admin:
            return redact_secrets(self.store.list_objects(kind, None))
        return redact_secrets(self.store.list_objects(kind, self._scope(cls, tenant)))

    def list_page(self, kind: str, tenant: str | None, *, limit: int, after: int) -> Page[Object]:
        """``list_objects`` a page at a time (the API's lists; see store/paging.py)."""
        cls = KINDS[kind]
        if kind == "Tenant":
            page = self.store.list_page("Tenant", "", limit=limit, after=after)
            if self.caller.is_platform_admin:
                return page
            # Others see their own tenant only: the store's count of the rows after this page
            # would count tenants they cannot see (and tell them how many there are).
            seen = [t for t in page.items if self.caller.sees_tenant(t.name)]
            return Page(seen, page.next_after, None)
        if kind == "PriceList" and not self.caller.is_platform_admin:
            page = self.store.list_page(kind, "", limit=limit, after=after)
            return Page([p for p in page.items if self._sees_prices(p)], page.next_after, None)
        if not cls.namespaced:
            scope: str | None = ""
        elif tenant is None and self.caller.is_platform_admin:
            scope = None
        else:
            scope = self._scope(cls, tenant)
        return redact_page(self.store.list_page(kind, scope, limit=limit, after=after))

    def visible(self, kind: str, tenant: str | None, obj: Object) -> Object | None:
        """``obj`` as ``list_page(kind, tenant)`` would show it to the caller, or None when that
        list would not hold it: the same rules for one object (the watch streams' filter)."""
        cls = KINDS[kind]
        if kind == "Tenant":
            seen = self.caller.is_platform_admin or self.caller.sees_tenant(obj.name)
            return obj if seen else None
        if kind == "PriceList" and not self.caller.is_platform_admin:
            return obj if self._sees_prices(obj) else None
        every_tenant = tenant is None and self.caller.is_platform_admin
        if cls.namespaced and not every_tenant and obj.tenant != self._scope(cls, tenant):
            return None
        return redact_secret(obj)

    # writes -------------------------------------------------------------------------------

    def apply_text(self, text: str | bytes) -> list[Applied]:
        """Apply every document of a YAML/JSON text; all are validated before any is stored."""
        return [self._apply(obj) for obj in self.prepare_text(text)]

    def prepare_text(self, text: str | bytes) -> list[Object]:
        """Every document of a text, parsed and checked against the caller; nothing stored."""
        documents = load_documents(text)
        if not documents:
            raise InvalidObject([FieldError("", "no objects in the request")])
        objects = [
            parse_object(doc, index=i if len(documents) > 1 else None)
            for i, doc in enumerate(documents)
        ]
        return [self._prepare(obj) for obj in objects]

    async def apply_async(self, obj: Object) -> Applied:
        """``apply`` of one prepared object for a coroutine: a new object waits for its group
        commit without holding a thread; an existing one is settled in a worker thread."""
        outcome = await self.store.write_together_async(self._creation(obj), _reference_keys(obj))
        if isinstance(outcome, Applied):
            return outcome
        return await asyncio.to_thread(self._settle, outcome)

    def replace(self, kind: str, name: str, text: str | bytes) -> Object:
        """Update one existing object; ``metadata.resourceVersion`` is required (409 if stale)."""
        documents = load_documents(text)
        if len(documents) != 1:
            raise InvalidObject([FieldError("", "a replace takes exactly one object")])
        obj = self._prepare(parse_object(documents[0]))
        if obj.kind != kind or obj.name != name:
            raise InvalidObject(
                [
                    FieldError(
                        "metadata.name",
                        f"the body is {obj.kind} {obj.name}, the path {kind} {name}",
                    )
                ]
            )
        if obj.metadata.resource_version is None:
            raise InvalidObject(
                [FieldError("metadata.resourceVersion", "required: the version you read")]
            )
        current = self.store.get(obj.kind, obj.tenant, obj.name)
        obj = keep_shown_values(check_system_keys(obj, current), current)
        if isinstance(obj, Job):
            with self.store.transaction(write=False) as tx:
                found = self.store.find_each(_reference_keys(obj), conn=tx)
                obj = obj.model_copy(update={"spec": self._resolved(obj, found, tx)})
            if not _same_job_spec(current, obj):
                raise Conflict(f"job {name}: a job cannot change after submission")
        if isinstance(obj, Queue):
            with self.store.transaction(write=False) as tx:
                self._check_queue(obj, current, tx)
        updated = self.store.update(obj, expected_version=obj.metadata.resource_version)
        self._identity_written(updated.kind)
        self.store.record_event(updated, "Updated", f"updated by {self.caller.user}")
        return updated

    def delete(self, kind: str, name: str, tenant: str | None) -> str:
        obj = self.get(kind, name, tenant)
        self._authorize_write(obj.kind)
        if isinstance(obj, Job):
            if obj.status is not None and obj.status.phase.finished:
                # Nothing runs: the job and its task records go now (its logs stay on disk).
                with self.store.transaction() as tx:
                    TaskRepository(self.store).delete_job(obj.metadata.uid or "", conn=tx)
                    self.store.delete("Job", obj.tenant, obj.name, conn=tx)
                    self.store.record_event(
                        obj, "Deleted", f"deleted by {self.caller.user}", conn=tx
                    )
                return f"job {name} deleted"
            now = isoformat(self.store.clock.now())
            self._annotate(obj, {CANCEL_ANNOTATION: now, DELETE_ANNOTATION: now}, keep=True)
            self.store.record_event(obj, "DeleteRequested", f"deleted by {self.caller.user}")
            return f"job {name} deleting"
        if isinstance(obj, Tenant):
            for child in ("User", "Queue", "Job"):
                if self.store.count(child, obj.name):
                    raise Conflict(f"tenant {name} still has {child.lower()}s; delete them first")
        if isinstance(obj, User):
            revoked = users.delete_user(self.store, self.caller, obj)  # ranks, last admin
            self._identity_written(obj.kind)
            return f"user {name} deleted ({revoked} token(s) revoked)"
        self.store.delete(obj.kind, obj.tenant, obj.name)
        self._identity_written(obj.kind)
        return f"{kind.lower()} {name} deleted"

    def cancel(self, name: str, tenant: str | None) -> Job:
        job = self.get("Job", name, tenant)
        assert isinstance(job, Job)
        self._authorize_write("Job")
        phase = job.status.phase if job.status else JobPhase.PENDING
        if phase.finished:
            raise Conflict(f"job {name} already finished ({phase})")
        if CANCEL_ANNOTATION in job.metadata.annotations:
            return job
        now = isoformat(self.store.clock.now())
        updated = self._annotate(job, {CANCEL_ANNOTATION: now})
        self.store.record_event(job, "CancelRequested", f"cancelled by {self.caller.user}")
        assert isinstance(updated, Job)
        return updated

    # helpers ------------------------------------------------------------------------------

    def _identity_written(self, kind: str) -> None:
        if kind in IDENTITY_KINDS and self.identity_changed is not None:
            self.identity_changed()

    def _annotate(self, obj: Object, added: dict[str, str], *, keep: bool = False) -> Object:
        """Add annotations; ``keep`` leaves ones already there. Retries when the controller
        wrote the status in between (the write is a compare-and-swap on resourceVersion)."""
        for attempt in range(5):
            current = self.store.get(obj.kind, obj.tenant, obj.name)
            annotations = dict(current.metadata.annotations)
            for key, value in added.items():
                if not (keep and key in annotations):
                    annotations[key] = value
            meta = current.metadata.model_copy(update={"annotations": annotations})
            try:
                return self.store.update(
                    current.model_copy(update={"metadata": meta}),
                    expected_version=current.metadata.resource_version,
                )
            except Conflict:
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def _scope(self, cls: type[Object], tenant: str | None) -> str:
        """The tenant to read or write in; another tenant's is 404."""
        if not cls.namespaced:
            return ""
        wanted = tenant or self.caller.tenant
        if not wanted:
            raise InvalidObject(
                [FieldError("tenant", "which tenant? a platform admin must name one")]
            )
        if not self.caller.sees_tenant(wanted):
            raise NotFound(f"tenant {wanted} not found")
        return wanted

    def _authorize_write(self, kind: str) -> None:
        if kind in READ_ONLY_KINDS:
            raise Forbidden(f"{kind} objects are reported by backends and cannot be written")
        if kind in PLATFORM_ADMIN_KINDS:
            if not self.caller.is_platform_admin:
                raise Forbidden(f"only a platform admin may write {kind} objects")
            return
        if not self.caller.may(Verb.WRITE, kind):
            raise Forbidden(f"role {self.caller.role} may not write {kind} objects")

    def _prepare(self, obj: Object) -> Object:
        """Fill the default tenant, check visibility, role and references; nothing is stored."""
        if isinstance(obj, User):
            return users.prepare_user(self.store, self.caller, obj)  # ranks, tenant-less roles
        if isinstance(obj, Invitation):  # its one-time token is made and shown by its route
            raise InvalidObject(
                [FieldError("kind", "invite with POST /api/v1/invitations (aipaas invite)")]
            )
        cls = type(obj)
        if cls.namespaced:
            tenant = obj.metadata.tenant or self.caller.tenant
            if not tenant:
                raise InvalidObject(
                    [FieldError("metadata.tenant", "required: a platform admin must name one")]
                )
            if not self.caller.sees_tenant(tenant):
                raise NotFound(f"tenant {tenant} not found")
            obj = obj.model_copy(
                update={"metadata": obj.metadata.model_copy(update={"tenant": tenant})}
            )
        elif obj.metadata.tenant:
            raise InvalidObject(
                [FieldError("metadata.tenant", f"{obj.kind} objects belong to no tenant")]
            )
        elif obj.kind == "Tenant":
            if isinstance(obj, Tenant) and default_class_only(self.store, self.caller, obj):
                return obj.model_copy(update={"status": None})  # its admin's default class
            # Writing tenants is the platform admin's action: refused (403) before the
            # visibility of the tenant is considered.
            self._authorize_write(obj.kind)
        self._authorize_write(obj.kind)
        if getattr(obj, "status", None) is not None:
            obj = obj.model_copy(update={"status": None})  # status is the controller's
        return obj

    def _as_submitted(self, obj: Object, spec: JobSpec | None) -> Object:
        """A new job shows a phase from the start, who submitted it (for metering) and its
        resolved ``spec`` (one copy of the object for all three)."""
        if not isinstance(obj, Job):
            return obj
        annotations = {**obj.metadata.annotations, SUBMITTER_ANNOTATION: self.caller.user}
        meta = obj.metadata.model_copy(update={"annotations": annotations})
        update: dict[str, Any] = {"metadata": meta, "status": JobStatus(reason="Submitted")}
        if spec is not None and spec is not obj.spec:
            update["spec"] = spec
        return obj.model_copy(update=update)

    def _check_references(
        self, obj: Object, tx: Connection, keys: list[ObjectKey]
    ) -> dict[ObjectKey, Object]:
        """Raise if the tenant or queue is missing; return what was found of the references
        (the object stored under its name among them).

        One query for them all, since every submission asks them (one for the whole batch,
        inside a group commit)."""
        tenant = ("Tenant", "", obj.tenant)
        queue = ("Queue", obj.tenant, obj.spec.queue) if isinstance(obj, Job) else None
        found = self.store.find_each(keys, conn=tx)
        check_data_references(obj, found)  # server/data_checks.py
        if obj.namespaced and obj.tenant and tenant not in found:  # "": tenant-less users
            raise InvalidObject(
                [FieldError("metadata.tenant", f"tenant {obj.tenant} does not exist")]
            )
        if isinstance(obj, Job) and queue not in found:
            raise InvalidObject(
                [
                    FieldError(
                        "spec.queue",
                        f"queue {obj.spec.queue} does not exist in tenant {obj.tenant}",
                    )
                ]
            )
        check_service(obj, found, platform_admin=self.caller.is_platform_admin)
        check_finops(obj, found)
        return found

    def _resolved(self, job: Job, found: dict[ObjectKey, Object], tx: Connection) -> JobSpec:
        """The job's spec with its priority class resolved (server/submission.py)."""
        tenant = found.get(("Tenant", "", job.tenant))

        def priority_class(name: str) -> PriorityClass | None:
            key = ("PriorityClass", "", name)
            stored = found[key] if key in found else self.store.find_each([key], conn=tx).get(key)
            return stored if isinstance(stored, PriorityClass) else None

        return resolve_priority(
            job,
            platform_admin=self.caller.is_platform_admin,
            tenant=tenant if isinstance(tenant, Tenant) else None,
            classes=priority_class,
        )

    def _check_queue(self, queue: Queue, current: Object | None, tx: Connection) -> None:
        """The queue tree's rules for a queue's parent (server/submission.py)."""

        def queues_named(names: Sequence[str]) -> dict[str, Queue]:
            keys = [("Queue", queue.tenant, name) for name in names]
            found = self.store.find_each(keys, conn=tx)
            return {obj.name: obj for obj in found.values() if isinstance(obj, Queue)}

        check_queue_parent(
            queue,
            current if isinstance(current, Queue) else None,
            queues_named,
            lambda name: unfinished_jobs_in(tx, queue.tenant, name, limit=4),
        )

    def _jobs_named(self, tenant: str, tx: Connection) -> Callable[[Sequence[str]], dict[str, Job]]:
        def jobs_named(names: Sequence[str]) -> dict[str, Job]:
            found = self.store.find_each([("Job", tenant, name) for name in names], conn=tx)
            return {obj.name: obj for obj in found.values() if isinstance(obj, Job)}

        return jobs_named

    def _apply(self, obj: Object) -> Applied:
        """Check references, then create (with its event, in one transaction shared with other
        submissions of the moment) or update."""
        outcome = self.store.write_together(self._creation(obj), _reference_keys(obj))
        if isinstance(outcome, Applied):
            return outcome
        return self._settle(outcome)

    def _creation(self, obj: Object) -> Callable[[Connection], _Stored | Applied]:
        """The write that creates ``obj`` unless an object of its name is stored (returned).

        A job's dependencies are read in the same transaction: a job it depends on that was
        applied before it (an earlier document of the same request) is there."""

        keys = _reference_keys(obj)

        def create_unless_stored(tx: Connection) -> _Stored | Applied:
            found = self._check_references(obj, tx, keys)
            spec = self._resolved(obj, found, tx) if isinstance(obj, Job) else None
            current = found.get(keys[0])
            if isinstance(obj, Queue):
                self._check_queue(obj, current, tx)
            if current is not None:
                wanted = obj if spec is None else obj.model_copy(update={"spec": spec})
                return _Stored(current, wanted)
            check_system_keys(obj, None)  # raises for any: a new object has none stored
            keep_shown_values(obj, None)  # raises for the mark: no value is stored
            if isinstance(obj, Job):
                check_dependencies(obj, self._jobs_named(obj.tenant, tx))
                check_leaf_queue(obj, child_queues(tx, obj.tenant, obj.spec.queue, limit=4))
            created = self.store.create(self._as_submitted(obj, spec), conn=tx, later=True)
            message = f"created by {self.caller.user}"
            self.store.record_event(created, "Created", message, conn=tx, later=True)
            return Applied(created, "created")

        return create_unless_stored

    def _settle(self, stored: _Stored) -> Applied:
        """An object of this name exists: unchanged, refused (jobs) or updated."""
        current = stored.current
        obj = keep_shown_values(check_system_keys(stored.wanted, current), current)
        if isinstance(obj, Job):
            if _same_job_spec(current, obj):
                return Applied(current, "unchanged")
            raise Conflict(
                f"job {obj.name} already exists with another spec; a job cannot change after "
                "submission (delete it and submit again)"
            )
        # A Secret is written again even when nothing changed: "unchanged" (or an unmoved
        # resourceVersion, or no Updated event) would tell a writer who may not read the values
        # that a guessed value is the stored one.
        if _same(current, obj) and not isinstance(obj, Secret):
            return Applied(current, "unchanged")
        updated = self.store.update(obj, expected_version=obj.metadata.resource_version)
        self._identity_written(updated.kind)
        self.store.record_event(updated, "Updated", f"updated by {self.caller.user}")
        return Applied(updated, "configured")


def _reference_keys(obj: Object) -> list[ObjectKey]:
    """What creating ``obj`` looks up: an object of its name, its tenant, its job's queue,
    priority class and the jobs it depends on, its queue's parent."""
    keys = [(obj.kind, obj.tenant, obj.name)]
    if obj.namespaced:
        keys.append(("Tenant", "", obj.tenant))
    if isinstance(obj, Job):
        keys.append(("Queue", obj.tenant, obj.spec.queue))
        keys.extend(priority_class_keys(obj))
        keys.extend(("Job", obj.tenant, name) for name in obj.spec.depends_on)
    if isinstance(obj, Queue) and obj.spec.parent is not None:
        keys.append(("Queue", obj.tenant, obj.spec.parent))
    keys.extend(data_reference_keys(obj))
    keys.extend(service_reference_keys(obj))
    keys.extend(finops_reference_keys(obj))
    return keys


def _same_job_spec(current: Object, wanted: Object) -> bool:
    """The stored job's spec is what the request resolves to. A job stored before the server
    resolved ``preemptible`` has none: the resolved one is not a change to it."""
    stored = current.to_wire().get("spec") or {}
    asked = wanted.to_wire().get("spec") or {}
    if "preemptible" not in stored:
        asked = {k: v for k, v in asked.items() if k != "preemptible"}
    return bool(stored == asked)


def _same(current: Object, wanted: Object) -> bool:
    def essence(obj: Object) -> Any:
        wire = obj.to_wire()
        meta = wire.get("metadata", {})
        return (wire.get("spec"), meta.get("labels"), meta.get("annotations"))

    return bool(essence(current) == essence(wanted))
