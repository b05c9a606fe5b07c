"""What the API does with objects, for one caller: the rules between routes and the store.

Every call checks, in order: the kind exists; the caller may see the tenant (else 404); the
role allows the verb (else 403); the object is valid against its references (tenant, queue).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection

from aipaas.api.job import CANCEL_ANNOTATION, Job, JobPhase, JobStatus
from aipaas.api.meta import Object
from aipaas.api.registry import KINDS, load_documents, parse_object
from aipaas.api.tenancy import Tenant, User
from aipaas.clock import isoformat
from aipaas.errors import Conflict, FieldError, Forbidden, InvalidObject, NotFound
from aipaas.metering.usage import SUBMITTER_ANNOTATION
from aipaas.store import Store, TaskRepository
from aipaas.store.paging import Page
from aipaas.tenancy import users
from aipaas.tenancy.principal import Principal, Verb

DELETE_ANNOTATION = "aipaas.dev/delete-requested"
READ_ONLY_KINDS = frozenset({"Node"})
# Writing these changes who a token is or what it may do: cached principals must go.
IDENTITY_KINDS = frozenset({"User", "Tenant"})


@dataclass(frozen=True)
class Applied:
    object: Object
    action: Literal["created", "configured", "unchanged"]


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
        return self.store.get(kind, scope, name)

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
        return found[0]

    def list_objects(self, kind: str, tenant: str | None) -> list[Object]:
        cls = KINDS[kind]
        if kind == "Tenant":
            items = self.store.list_objects("Tenant", "")
            return [t for t in items if self.caller.sees_tenant(t.name)]
        if not cls.namespaced:
            return self.store.list_objects(kind, "")
        if tenant is None and self.caller.is_platform_admin:
            return self.store.list_objects(kind, None)
        return self.store.list_objects(kind, self._scope(cls, tenant))

    def list_page(self, kind: str, tenant: str | None, *, limit: int, after: int) -> Page[Object]:
        """``list_objects`` a page at a time (the API's lists; see store/paging.py)."""
        cls = KINDS[kind]
        if kind == "Tenant":
            page = self.store.list_page("Tenant", "", limit=limit, after=after)
            seen = [t for t in page.items if self.caller.sees_tenant(t.name)]
            return Page(seen, page.next_after, page.remaining)
        if not cls.namespaced:
            scope: str | None = ""
        elif tenant is None and self.caller.is_platform_admin:
            scope = None
        else:
            scope = self._scope(cls, tenant)
        return self.store.list_page(kind, scope, limit=limit, after=after)

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
        return await asyncio.to_thread(self._settle, obj, outcome)

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
        if isinstance(obj, Job) and current.to_wire().get("spec") != obj.to_wire().get("spec"):
            raise Conflict(f"job {name}: a job cannot change after submission")
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
        if not self.caller.may(Verb.WRITE, kind):
            raise Forbidden(f"role {self.caller.role} may not write {kind} objects")

    def _prepare(self, obj: Object) -> Object:
        """Fill the default tenant, check visibility, role and references; nothing is stored."""
        if isinstance(obj, User):
            return users.prepare_user(self.store, self.caller, obj)  # ranks, tenant-less roles
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
            # Writing tenants is the platform admin's action: refused (403) before the
            # visibility of the tenant is considered.
            self._authorize_write(obj.kind)
        self._authorize_write(obj.kind)
        if getattr(obj, "status", None) is not None:
            obj = obj.model_copy(update={"status": None})  # status is the controller's
        return obj

    def _as_submitted(self, obj: Object) -> Object:
        """A new job shows a phase from the start, and who submitted it (for metering)."""
        if not isinstance(obj, Job):
            return obj
        annotations = {**obj.metadata.annotations, SUBMITTER_ANNOTATION: self.caller.user}
        meta = obj.metadata.model_copy(update={"annotations": annotations})
        return obj.model_copy(update={"metadata": meta, "status": JobStatus(reason="Submitted")})

    def _check_references(self, obj: Object, tx: Connection) -> Object | None:
        """Raise if the tenant or queue is missing; return the object stored under its name.

        One query for the three, since every submission asks them (one for the whole batch,
        inside a group commit)."""
        own = (obj.kind, obj.tenant, obj.name)
        tenant = ("Tenant", "", obj.tenant)
        queue = ("Queue", obj.tenant, obj.spec.queue) if isinstance(obj, Job) else None
        found = self.store.find_each(_reference_keys(obj), conn=tx)
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
        return found.get(own)

    def _apply(self, obj: Object) -> Applied:
        """Check references, then create (with its event, in one transaction shared with other
        submissions of the moment) or update."""
        outcome = self.store.write_together(self._creation(obj), _reference_keys(obj))
        if isinstance(outcome, Applied):
            return outcome
        return self._settle(obj, outcome)

    def _creation(self, obj: Object) -> Callable[[Connection], Object | Applied]:
        """The write that creates ``obj`` unless an object of its name is stored (returned)."""

        def create_unless_stored(tx: Connection) -> Object | Applied:
            current = self._check_references(obj, tx)
            if current is not None:
                return current
            created = self.store.create(self._as_submitted(obj), conn=tx, later=True)
            message = f"created by {self.caller.user}"
            self.store.record_event(created, "Created", message, conn=tx, later=True)
            return Applied(created, "created")

        return create_unless_stored

    def _settle(self, obj: Object, current: Object) -> Applied:
        """An object of this name exists: unchanged, refused (jobs) or updated."""
        if isinstance(obj, Job):
            if current.to_wire().get("spec") == obj.to_wire().get("spec"):
                return Applied(current, "unchanged")
            raise Conflict(
                f"job {obj.name} already exists with another spec; a job cannot change after "
                "submission (delete it and submit again)"
            )
        if _same(current, obj):
            return Applied(current, "unchanged")
        updated = self.store.update(obj, expected_version=obj.metadata.resource_version)
        self._identity_written(updated.kind)
        self.store.record_event(updated, "Updated", f"updated by {self.caller.user}")
        return Applied(updated, "configured")


def _reference_keys(obj: Object) -> list[tuple[str, str, str]]:
    """What creating ``obj`` looks up: an object of its name, its tenant, its job's queue."""
    keys = [(obj.kind, obj.tenant, obj.name)]
    if obj.namespaced:
        keys.append(("Tenant", "", obj.tenant))
    if isinstance(obj, Job):
        keys.append(("Queue", obj.tenant, obj.spec.queue))
    return keys


def _same(current: Object, wanted: Object) -> bool:
    def essence(obj: Object) -> Any:
        wire = obj.to_wire()
        meta = wire.get("metadata", {})
        return (wire.get("spec"), meta.get("labels"), meta.get("annotations"))

    return bool(essence(current) == essence(wanted))
