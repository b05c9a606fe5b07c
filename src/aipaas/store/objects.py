"""The objects table: create, read, list, update with resourceVersion CAS, write status,
delete. Reached as ``store.objects`` (store/store.py); the Store's own methods of the same
names hand over to it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Connection, and_, bindparam, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from aipaas.api.meta import Object
from aipaas.clock import isoformat
from aipaas.errors import AlreadyExists, Conflict, NotFound
from aipaas.store import tables
from aipaas.store.bulk import rows_with_keys, update_rows
from aipaas.store.paging import Page
from aipaas.store.rows import (
    BODY_CHUNK,
    PARSED,
    ObjectKey,
    body_of,
    count_after,
    describe,
    phase_of,
    remember,
    remember_written,
    spec_of,
    status_json,
    status_of,
    to_object,
)

if TYPE_CHECKING:
    from aipaas.store.store import Store

# Statements of the hot paths, built once: building a statement costs more than running it.
_SELECT_ONE = select(tables.objects).where(
    tables.objects.c.kind == bindparam("b_kind"),
    tables.objects.c.tenant == bindparam("b_tenant"),
    tables.objects.c.name == bindparam("b_name"),
)
_INSERT_OBJECT = insert(tables.objects)


class ObjectRepository:
    """Every kind's objects. Tenant "" holds cluster-wide kinds (Tenant, Node)."""

    def __init__(self, store: Store) -> None:
        self._store = store  # its transactions, clock and group commit

    def create(self, obj: Object, *, conn: Connection | None = None, later: bool = False) -> Object:
        """Insert a new object; its uid, resourceVersion and creation time are set here.

        ``later`` (inside ``write_together``): the insert goes with the batch's others at its
        end, where a duplicate name fails the batch and the one-by-one rerun says AlreadyExists.
        """
        now = self._store.clock.now()
        uid = str(uuid.uuid4())
        meta = obj.metadata.model_copy(
            update={
                "uid": uid,
                "resource_version": "1",
                "generation": 1,
                "creation_timestamp": isoformat(now),
            }
        )
        stored = obj.model_copy(update={"metadata": meta})
        row = {
            "kind": obj.kind,
            "tenant": obj.tenant,
            "name": obj.name,
            "uid": uid,
            "resource_version": 1,
            "generation": 1,
            "phase": phase_of(stored),
            "body": body_of(stored),
            "status": status_of(stored),
            "created_at": now,
            "updated_at": now,
        }
        try:
            if conn is None:
                with self._store.transaction() as tx:
                    tx.execute(_INSERT_OBJECT, row)
            elif later:
                self._store.group_commit.insert_later(conn, tables.objects, row)
            else:
                conn.execute(_INSERT_OBJECT, row)
        except IntegrityError as err:
            raise AlreadyExists(
                f"{describe(obj.kind, obj.tenant, obj.name)} already exists"
            ) from err
        # The controller in this process lists it soon: it need not parse what was just
        # validated (a uid that never commits is never looked up; the rerun makes a new one).
        remember(stored)
        return stored

    def get(self, kind: str, tenant: str, name: str, *, conn: Connection | None = None) -> Object:
        key = {"b_kind": kind, "b_tenant": tenant, "b_name": name}
        if conn is None:
            with self._store.transaction(write=False) as tx:
                row = tx.execute(_SELECT_ONE, key).mappings().first()
        else:
            row = conn.execute(_SELECT_ONE, key).mappings().first()
        if row is None:
            raise NotFound(f"{describe(kind, tenant, name)} not found")
        return to_object(row)

    def find(
        self, kind: str, tenant: str, name: str, *, conn: Connection | None = None
    ) -> Object | None:
        try:
            return self.get(kind, tenant, name, conn=conn)
        except NotFound:
            return None

    def find_each(self, keys: Sequence[ObjectKey], *, conn: Connection) -> dict[ObjectKey, Object]:
        """The objects of several ``(kind, tenant, name)`` keys that exist, in one query (none
        when the group-commit batch this runs in looked them up already)."""
        prefetched = self._store.group_commit.prefetched(keys)
        if prefetched is not None:
            return prefetched
        return self.find_each_now(conn, keys)

    @staticmethod
    def find_each_now(conn: Connection, keys: Sequence[ObjectKey]) -> dict[ObjectKey, Object]:
        rows = rows_with_keys(conn, tables.objects, ("kind", "tenant", "name"), keys)
        found = (to_object(row) for row in rows)
        return {(obj.kind, obj.tenant, obj.name): obj for obj in found}

    def list_objects(
        self,
        kind: str,
        tenant: str | None = None,
        *,
        phases: Sequence[str] | None = None,
        exclude_phases: Sequence[str] | None = None,
    ) -> list[Object]:
        """Objects of a kind, in one tenant (or all with None), oldest first."""
        query = select(tables.objects).where(tables.objects.c.kind == kind)
        if tenant is not None:
            query = query.where(tables.objects.c.tenant == tenant)
        if phases is not None:
            query = query.where(tables.objects.c.phase.in_(list(phases)))
        if exclude_phases is not None:
            query = query.where(tables.objects.c.phase.not_in(list(exclude_phases)))
        query = query.order_by(tables.objects.c.id)
        objects = tables.objects
        # Versions first, bodies only of what is not parsed yet: the controller lists every
        # unfinished job each cycle, and most have not changed since the last (their text was
        # most of what a listing cost).
        light = query.with_only_columns(objects.c.id, objects.c.uid, objects.c.resource_version)
        with self._store.transaction(write=False) as tx:
            versions = tx.execute(light).all()
            parsed = PARSED
            listed = [parsed.get((uid, int(version))) for _, uid, version in versions]
            missing = [row[0] for row, obj in zip(versions, listed, strict=True) if obj is None]
            if not missing:  # the common case: one pass, in order
                return cast("list[Object]", listed)
            found: dict[int, Object] = {}
            for first in range(0, len(missing), BODY_CHUNK):
                chunk = missing[first : first + BODY_CHUNK]
                full = select(objects).where(objects.c.id.in_(chunk))
                for row in tx.execute(full).mappings():
                    found[row["id"]] = to_object(row)
        out = []  # a row deleted between the two reads is left out
        for (row_id, _, _), obj in zip(versions, listed, strict=True):
            if obj is None:
                obj = found.get(row_id)
            if obj is not None:
                out.append(obj)
        return out

    def list_page(
        self, kind: str, tenant: str | None = None, *, limit: int, after: int = 0
    ) -> Page[Object]:
        """At most ``limit`` objects of a kind after row id ``after``, oldest first (the API's
        paginated lists; the controller keeps ``list_objects``, which reads all at once)."""
        objects = tables.objects
        where = [objects.c.kind == kind, objects.c.id > bindparam("b_after")]
        if tenant is not None:
            where.append(objects.c.tenant == tenant)
        query = select(objects).where(*where).order_by(objects.c.id).limit(limit + 1)
        with self._store.transaction(write=False) as tx:
            rows = tx.execute(query, {"b_after": after}).mappings().all()
            more = len(rows) > limit
            rows = rows[:limit]
            last = int(rows[-1]["id"]) if more else None
            remaining = count_after(tx, objects, where, last) if last is not None else None
        return Page([to_object(row) for row in rows], last, remaining)

    def find_by_name(self, kind: str, name: str) -> list[Object]:
        """Objects of a kind with this name, in any tenant."""
        query = select(tables.objects).where(
            tables.objects.c.kind == kind, tables.objects.c.name == name
        )
        with self._store.transaction(write=False) as tx:
            rows = tx.execute(query).mappings().all()
        return [to_object(row) for row in rows]

    def count(self, kind: str, tenant: str | None = None) -> int:
        query = (
            select(func.count()).select_from(tables.objects).where(tables.objects.c.kind == kind)
        )
        if tenant is not None:
            query = query.where(tables.objects.c.tenant == tenant)
        with self._store.transaction(write=False) as tx:
            return int(tx.execute(query).scalar_one())

    def kind_marks(self, kinds: Sequence[str]) -> dict[str, tuple[object, ...]]:
        """Per kind, a mark that changes whenever one of its objects is created, written or
        deleted, by any writer: (count, largest row id, newest creation time, sum of
        resourceVersions); a kind with no object is left out. Every write bumps its object's
        resourceVersion and nothing lowers one, so two equal marks mean no write in between,
        except a delete and a create in between that take the same row id (SQLite may reuse the
        largest), the same creation time (clocks of two servers) and a resourceVersion sum that
        the other writes make up for: the controller, which keeps its listing while the mark of
        ``Job`` holds (controller/quiet.py), also lists again every few seconds."""
        objects = tables.objects
        query = (
            select(
                objects.c.kind,
                func.count(),
                func.max(objects.c.id),
                func.max(objects.c.created_at),
                func.sum(objects.c.resource_version),
            )
            .where(objects.c.kind.in_(list(kinds)))
            .group_by(objects.c.kind)
        )
        with self._store.transaction(write=False) as tx:
            return {str(row[0]): tuple(row[1:]) for row in tx.execute(query).all()}

    def count_by_phase(self, kind: str) -> dict[str, int]:
        query = (
            select(tables.objects.c.phase, func.count())
            .where(tables.objects.c.kind == kind)
            .group_by(tables.objects.c.phase)
        )
        with self._store.transaction(write=False) as tx:
            return {str(phase): int(n) for phase, n in tx.execute(query).all()}

    def update(self, obj: Object, *, expected_version: str | None = None) -> Object:
        """Replace metadata (labels, annotations) and spec; status is untouched.

        With ``expected_version`` the write happens only if the stored resourceVersion still
        equals it (else Conflict, HTTP 409).
        """
        with self._store.transaction() as tx:
            current = self.get(obj.kind, obj.tenant, obj.name, conn=tx)
            version = int(current.metadata.resource_version or 0)
            if expected_version is not None and expected_version != str(version):
                raise Conflict(
                    f"{describe(obj.kind, obj.tenant, obj.name)} was modified: resourceVersion "
                    f"is {version}, not {expected_version}"
                )
            generation = current.metadata.generation or 1
            if spec_of(obj) != spec_of(current):
                generation += 1
            meta = current.metadata.model_copy(
                update={
                    "labels": obj.metadata.labels,
                    "annotations": obj.metadata.annotations,
                    "resource_version": str(version + 1),
                    "generation": generation,
                }
            )
            stored = obj.model_copy(
                update={"metadata": meta, "status": getattr(current, "status", None)}
            )
            self._write(tx, stored, version, generation)
        return stored

    def update_status(
        self,
        obj: Object,
        status: Any,
        *,
        expected_version: str | None = None,
        conn: Connection | None = None,
    ) -> Object:
        """Write the status of ``obj`` (the controller's path). CAS as in ``update``."""
        if conn is None:
            with self._store.transaction() as tx:
                return self.update_status(obj, status, expected_version=expected_version, conn=tx)
        tx = conn
        current = self.get(obj.kind, obj.tenant, obj.name, conn=tx)
        version = int(current.metadata.resource_version or 0)
        if expected_version is not None and expected_version != str(version):
            raise Conflict(
                f"{describe(obj.kind, obj.tenant, obj.name)} was modified: resourceVersion "
                f"is {version}, not {expected_version}"
            )
        meta = current.metadata.model_copy(update={"resource_version": str(version + 1)})
        stored = current.model_copy(update={"metadata": meta, "status": status})
        self._write(tx, stored, version, current.metadata.generation or 1)
        return stored

    def write_statuses(self, changes: Sequence[tuple[Object, Any]], *, conn: Connection) -> None:
        """``write_status`` for many objects in one statement (the controller's cycle).

        When no row changed since the controller read it (the usual case), the objects as
        written are remembered, so that the next cycle does not parse them again.
        """
        if not changes:
            return
        now = self._store.clock.now()
        rows = [
            {
                "uid": obj.metadata.uid,
                "resource_version": int(obj.metadata.resource_version or 0),
                "phase": str(getattr(status, "phase", "") or ""),
                "status": status_json(status),
                "updated_at": now,
            }
            for obj, status in changes
        ]
        unchanged = update_rows(
            conn,
            tables.objects,
            rows,
            match=("uid", "resource_version"),
            increment=("resource_version",),
        )
        if unchanged == len(rows):
            for obj, status in changes:
                remember_written(obj, status)
            return
        # Someone wrote a row in between (an annotation): set every status regardless.
        for row in rows:
            del row["resource_version"]
        update_rows(conn, tables.objects, rows, match=("uid",), increment=("resource_version",))

    def write_status(self, obj: Object, status: Any, *, conn: Connection) -> None:
        """The controller's fast path: set status and bump resourceVersion, without reading.

        Safe without CAS because the controller is the only writer of status, and the row's
        spec and metadata are left as they are.
        """
        dumped = status_json(status)
        phase = getattr(status, "phase", None)
        conn.execute(
            update(tables.objects)
            .where(
                tables.objects.c.kind == obj.kind,
                tables.objects.c.tenant == obj.tenant,
                tables.objects.c.name == obj.name,
            )
            .values(
                resource_version=tables.objects.c.resource_version + 1,
                phase=str(phase) if phase is not None else "",
                status=dumped,
                updated_at=self._store.clock.now(),
            )
        )

    def _write(self, tx: Connection, stored: Object, version: int, generation: int) -> None:
        result = tx.execute(
            update(tables.objects)
            .where(
                and_(
                    tables.objects.c.kind == stored.kind,
                    tables.objects.c.tenant == stored.tenant,
                    tables.objects.c.name == stored.name,
                    tables.objects.c.resource_version == version,
                )
            )
            .values(
                resource_version=version + 1,
                generation=generation,
                phase=phase_of(stored),
                body=body_of(stored),
                status=status_of(stored),
                updated_at=self._store.clock.now(),
            )
        )
        if result.rowcount != 1:
            raise Conflict(f"{describe(stored.kind, stored.tenant, stored.name)} was modified")

    def delete(self, kind: str, tenant: str, name: str, *, conn: Connection | None = None) -> None:
        if conn is None:
            with self._store.transaction() as tx:
                self.delete(kind, tenant, name, conn=tx)
            return
        result = conn.execute(
            delete(tables.objects).where(
                tables.objects.c.kind == kind,
                tables.objects.c.tenant == tenant,
                tables.objects.c.name == name,
            )
        )
        if result.rowcount != 1:
            raise NotFound(f"{describe(kind, tenant, name)} not found")
