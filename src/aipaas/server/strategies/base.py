"""The rules every kind follows when the API writes or shows it, and the hooks a kind overrides.

A ``KindStrategy`` is what Kubernetes calls a REST strategy: ObjectService (server/service.py)
asks the strategy of an object's kind to prepare it, name and check its references, resolve it,
validate it on create and on update, decide whether an update changes anything, show it and
delete it. The defaults here are the rules of a plain kind; server/strategies/ holds the kinds
with rules of their own and the registry that maps a kind's name to its strategy.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aipaas.api.meta import Object
from aipaas.errors import Conflict, FieldError, Forbidden, InvalidObject, NotFound
from aipaas.store import Connection, Store
from aipaas.store.store import ObjectKey
from aipaas.tenancy.principal import Principal, Verb

ObjT = TypeVar("ObjT", bound=Object)


class WrittenBy(enum.Enum):
    """Who may write objects of a kind."""

    ROLES = "the role table"  # the caller's role must allow the kind (Principal.may)
    PLATFORM_ADMIN = "platform admins"  # cluster-wide policy, whatever the role table says
    BACKENDS = "backends"  # reported by backends (through the controller), never by the API


@dataclass(frozen=True)
class Writer:
    """Who writes, and where: what a strategy's hooks may read besides the object."""

    store: Store
    caller: Principal


class KindStrategy(Generic[ObjT]):
    """The rules of one kind; every hook's default is the rule of a plain kind.

    The service calls the hooks in this order. Apply: ``prepare`` (before any transaction),
    then in the transaction that stores it ``check_references`` (over what ``reference_keys``
    found), ``resolve``, ``validate``; a new object: ``keep_hidden``, ``validate_create``,
    ``as_created``; an object of the name stored: ``keep_hidden``, ``unchanged``. Replace:
    ``prepare``, ``keep_hidden``, ``validate_update``. Reads: ``visible_to``, ``shown``.
    Delete: ``delete``, which returns None to let the service delete the row itself.
    """

    written_by: WrittenBy = WrittenBy.ROLES
    changes_identity = False  # writing one changes who a token is or what it may do
    hides_some = False  # ``visible_to`` may say no: lists are filtered for non-admins

    def prepare(self, obj: ObjT, writer: Writer) -> ObjT:
        """Fill the default tenant, check visibility and role, drop the status."""
        return prepare_in_scope(obj, writer, self.written_by)

    def reference_keys(self, obj: ObjT) -> list[ObjectKey]:
        """What creating ``obj`` looks up besides an object of its name and its tenant."""
        return []

    def check_references(
        self, obj: ObjT, found: Mapping[ObjectKey, Object], writer: Writer
    ) -> None:
        """Raise if a reference is missing or refused (``found``: what the keys found)."""
        check_tenant_exists(obj, found)

    def resolve(
        self, obj: ObjT, found: Mapping[ObjectKey, Object], writer: Writer, tx: Connection
    ) -> ObjT:
        """``obj`` with what the server fills from its references (a job's priority)."""
        return obj

    def validate(self, obj: ObjT, current: ObjT | None, writer: Writer, tx: Connection) -> None:
        """Rules against other stored objects, on create and on update (``current``: stored)."""

    def keep_hidden(self, wanted: ObjT, current: Object | None) -> ObjT:
        """``wanted`` with the values a read hides taken from ``current`` (Secrets)."""
        return wanted

    def validate_create(self, obj: ObjT, writer: Writer, tx: Connection) -> None:
        """Rules a new object must meet that an update is not checked against again."""

    def as_created(self, obj: ObjT, writer: Writer) -> ObjT:
        """The object as first stored."""
        return obj

    def unchanged(self, current: ObjT, wanted: ObjT) -> bool:
        """Whether applying ``wanted`` over ``current`` changes nothing (raises when the
        change is refused)."""
        return same_essence(current, wanted)

    def validate_update(self, obj: ObjT, current: ObjT, writer: Writer) -> ObjT:
        """``obj`` as a replace stores it over ``current``, refused if it may not change."""
        return obj

    def visible_to(self, obj: ObjT, caller: Principal) -> bool:
        """Whether ``caller`` may see ``obj`` beyond its tenant's visibility."""
        return True

    def shown(self, obj: ObjT) -> ObjT:
        """What the API shows of ``obj``."""
        return obj

    def delete(self, obj: ObjT, writer: Writer) -> str | None:
        """Delete ``obj`` by the kind's own rules and say what happened; None: delete the
        row (after any refusal raised here)."""
        return None


def authorize_write(caller: Principal, kind: str, written_by: WrittenBy) -> None:
    """Raise Forbidden unless ``caller`` may write objects of ``kind``."""
    if written_by is WrittenBy.BACKENDS:
        raise Forbidden(f"{kind} objects are reported by backends and cannot be written")
    if written_by is WrittenBy.PLATFORM_ADMIN:
        if not caller.is_platform_admin:
            raise Forbidden(f"only a platform admin may write {kind} objects")
        return
    if not caller.may(Verb.WRITE, kind):
        raise Forbidden(f"role {caller.role} may not write {kind} objects")


def prepare_in_scope(obj: ObjT, writer: Writer, written_by: WrittenBy) -> ObjT:
    """The default ``prepare``: a namespaced object gets the caller's tenant when it names
    none and must be in a tenant the caller sees; a cluster-wide one names no tenant; the
    caller must be allowed to write the kind; the status is the controller's."""
    caller = writer.caller
    if type(obj).namespaced:
        tenant = obj.metadata.tenant or caller.tenant
        if not tenant:
            raise InvalidObject(
                [FieldError("metadata.tenant", "required: a platform admin must name one")]
            )
        if not caller.sees_tenant(tenant):
            raise NotFound(f"tenant {tenant} not found")
        obj = obj.model_copy(
            update={"metadata": obj.metadata.model_copy(update={"tenant": tenant})}
        )
    elif obj.metadata.tenant:
        raise InvalidObject(
            [FieldError("metadata.tenant", f"{obj.kind} objects belong to no tenant")]
        )
    authorize_write(caller, obj.kind, written_by)
    if getattr(obj, "status", None) is not None:
        obj = obj.model_copy(update={"status": None})  # status is the controller's
    return obj


def keys_to_find(obj: ObjT, strategy: KindStrategy[ObjT]) -> list[ObjectKey]:
    """What writing ``obj`` looks up, in one query: an object of its name first, its tenant,
    then the references its kind names."""
    keys = [(obj.kind, obj.tenant, obj.name)]
    if obj.namespaced:
        keys.append(("Tenant", "", obj.tenant))
    keys.extend(strategy.reference_keys(obj))
    return keys


def check_tenant_exists(obj: Object, found: Mapping[ObjectKey, Object]) -> None:
    """A namespaced object's tenant must be stored ("": the tenant-less users)."""
    if obj.namespaced and obj.tenant and ("Tenant", "", obj.tenant) not in found:
        raise InvalidObject([FieldError("metadata.tenant", f"tenant {obj.tenant} does not exist")])


def same_essence(current: Object, wanted: Object) -> bool:
    """The spec, labels and annotations are the stored ones."""

    def essence(obj: Object) -> Any:
        wire = obj.to_wire()
        meta = wire.get("metadata", {})
        return (wire.get("spec"), meta.get("labels"), meta.get("annotations"))

    return bool(essence(current) == essence(wanted))


def annotate(store: Store, obj: Object, added: dict[str, str], *, keep: bool = False) -> Object:
    """Add annotations; ``keep`` leaves ones already there. Retries when the controller
    wrote the status in between (the write is a compare-and-swap on resourceVersion)."""
    for attempt in range(5):
        current = store.get(obj.kind, obj.tenant, obj.name)
        annotations = dict(current.metadata.annotations)
        for key, value in added.items():
            if not (keep and key in annotations):
                annotations[key] = value
        meta = current.metadata.model_copy(update={"annotations": annotations})
        try:
            return store.update(
                current.model_copy(update={"metadata": meta}),
                expected_version=current.metadata.resource_version,
            )
        except Conflict:
            if attempt == 4:
                raise
    raise AssertionError("unreachable")
