"""What the API does with objects, for one caller: the rules between routes and the store.

Every call checks, in order: the kind exists; the caller may see the tenant (else 404); the
role allows the verb (else 403); the object is valid against its references (tenant, queue,
priority class, the jobs it depends on) and says only what its author may say (system labels
and annotations, priority numbers: server/submission.py), inside the transaction that stores it.
This module fixes that order; what differs between kinds is asked of the kind's strategy
(server/strategies/: prepare, references, resolve, validate, unchanged, shown, delete).

Who calls it: the routes (server/routes.py and the domains' routers), the watch streams, and
tests and benchmarks that write through the API's rules without HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from aipaas.api.job import CANCEL_ANNOTATION, Job, JobPhase
from aipaas.api.meta import Object
from aipaas.api.registry import KINDS, load_documents, parse_object
from aipaas.clock import isoformat
from aipaas.errors import Conflict, FieldError, InvalidObject, NotFound
from aipaas.server.strategies import shown, shown_all, shown_page, strategy_for
from aipaas.server.strategies.base import Writer, annotate, authorize_write, keys_to_find
from aipaas.server.submission import check_system_keys
from aipaas.store import Connection, Store
from aipaas.store.paging import Page
from aipaas.tenancy.principal import Principal


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
        self.writer = Writer(store, caller)

    # reads --------------------------------------------------------------------------------

    def get(self, kind: str, name: str, tenant: str | None) -> Object:
        cls = KINDS[kind]
        if cls.namespaced and tenant is None and self.caller.is_platform_admin:
            return self._find_anywhere(kind, name)
        scope = self._scope(cls, tenant)
        found = self.store.get(kind, scope, name)
        if not strategy_for(kind).visible_to(found, self.caller):
            raise NotFound(f"{kind.lower()} {name} not found")
        return shown(found)

    def _find_anywhere(self, kind: str, name: str) -> Object:
        """A platform admin who names no tenant: the one object of that name, if only one."""
        found = self.store.objects.find_by_name(kind, name)
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
        return shown(found[0])

    def list_objects(self, kind: str, tenant: str | None) -> list[Object]:
        cls = KINDS[kind]
        if not cls.namespaced:
            strategy = strategy_for(kind)
            items = self.store.list_objects(kind, "")
            return shown_all([o for o in items if strategy.visible_to(o, self.caller)])
        if tenant is None and self.caller.is_platform_admin:
            return shown_all(self.store.list_objects(kind, None))
        return shown_all(self.store.list_objects(kind, self._scope(cls, tenant)))

    def list_page(self, kind: str, tenant: str | None, *, limit: int, after: int) -> Page[Object]:
        """``list_objects`` a page at a time (the API's lists; see store/paging.py)."""
        cls = KINDS[kind]
        strategy = strategy_for(kind)
        if strategy.hides_some and not self.caller.is_platform_admin:
            page = self.store.objects.list_page(kind, "", limit=limit, after=after)
            # The store's count of the rows after this page would count objects the caller
            # cannot see (and tell them how many there are).
            seen = [o for o in page.items if strategy.visible_to(o, self.caller)]
            return Page(shown_all(seen), page.next_after, None)
        if not cls.namespaced:
            scope: str | None = ""
        elif tenant is None and self.caller.is_platform_admin:
            scope = None
        else:
            scope = self._scope(cls, tenant)
        return shown_page(self.store.objects.list_page(kind, scope, limit=limit, after=after))

    def visible(self, kind: str, tenant: str | None, obj: Object) -> Object | None:
        """``obj`` as ``list_page(kind, tenant)`` would show it to the caller, or None when that
        list would not hold it: the same rules for one object (the watch streams' filter)."""
        cls = KINDS[kind]
        strategy = strategy_for(kind)
        if not self.caller.is_platform_admin and not strategy.visible_to(obj, self.caller):
            return None
        every_tenant = tenant is None and self.caller.is_platform_admin
        if cls.namespaced and not every_tenant and obj.tenant != self._scope(cls, tenant):
            return None
        return shown(obj)

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
        keys = keys_to_find(obj, strategy_for(obj.kind))
        outcome = await self.store.write_together_async(self._creation(obj), keys)
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
        strategy = strategy_for(obj.kind)
        obj = strategy.keep_hidden(check_system_keys(obj, current), current)
        obj = strategy.validate_update(obj, current, self.writer)
        updated = self.store.update(obj, expected_version=obj.metadata.resource_version)
        self._identity_written(updated.kind)
        self.store.record_event(updated, "Updated", f"updated by {self.caller.user}")
        return updated

    def delete(self, kind: str, name: str, tenant: str | None) -> str:
        obj = self.get(kind, name, tenant)
        self._authorize_write(obj.kind)
        message = strategy_for(obj.kind).delete(obj, self.writer)
        if message is None:
            self.store.delete(obj.kind, obj.tenant, obj.name)
            message = f"{kind.lower()} {name} deleted"
        self._identity_written(obj.kind)
        return message

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
        updated = annotate(self.store, job, {CANCEL_ANNOTATION: now})
        self.store.record_event(job, "CancelRequested", f"cancelled by {self.caller.user}")
        assert isinstance(updated, Job)
        return updated

    # helpers ------------------------------------------------------------------------------

    def _identity_written(self, kind: str) -> None:
        if strategy_for(kind).changes_identity and self.identity_changed is not None:
            self.identity_changed()

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
        authorize_write(self.caller, kind, strategy_for(kind).written_by)

    def _prepare(self, obj: Object) -> Object:
        """Fill the default tenant, check visibility, role and references; nothing is stored."""
        prepared: Object = strategy_for(obj.kind).prepare(obj, self.writer)
        return prepared

    def _apply(self, obj: Object) -> Applied:
        """Check references, then create (with its event, in one transaction shared with other
        submissions of the moment) or update."""
        keys = keys_to_find(obj, strategy_for(obj.kind))
        outcome = self.store.write_together(self._creation(obj), keys)
        if isinstance(outcome, Applied):
            return outcome
        return self._settle(outcome)

    def _creation(self, obj: Object) -> Callable[[Connection], _Stored | Applied]:
        """The write that creates ``obj`` unless an object of its name is stored (returned).

        A job's dependencies are read in the same transaction: a job it depends on that was
        applied before it (an earlier document of the same request) is there."""

        strategy = strategy_for(obj.kind)
        keys = keys_to_find(obj, strategy)

        def create_unless_stored(tx: Connection) -> _Stored | Applied:
            # One query for all references, since every submission asks them (one for the
            # whole batch, inside a group commit).
            found = self.store.find_each(keys, conn=tx)
            strategy.check_references(obj, found, self.writer)
            wanted = strategy.resolve(obj, found, self.writer, tx)
            current = found.get(keys[0])
            strategy.validate(wanted, current, self.writer, tx)
            if current is not None:
                return _Stored(current, wanted)
            check_system_keys(wanted, None)  # raises for any: a new object has none stored
            strategy.keep_hidden(wanted, None)  # raises for the mark: no value is stored
            strategy.validate_create(wanted, self.writer, tx)
            created = self.store.create(
                strategy.as_created(wanted, self.writer), conn=tx, later=True
            )
            message = f"created by {self.caller.user}"
            self.store.record_event(created, "Created", message, conn=tx, later=True)
            return Applied(created, "created")

        return create_unless_stored

    def _settle(self, stored: _Stored) -> Applied:
        """An object of this name exists: unchanged, refused (jobs) or updated."""
        current = stored.current
        strategy = strategy_for(current.kind)
        obj = strategy.keep_hidden(check_system_keys(stored.wanted, current), current)
        if strategy.unchanged(current, obj):
            return Applied(current, "unchanged")
        updated = self.store.update(obj, expected_version=obj.metadata.resource_version)
        self._identity_written(updated.kind)
        self.store.record_event(updated, "Updated", f"updated by {self.caller.user}")
        return Applied(updated, "configured")
