"""The store: objects with resourceVersion CAS, events and tokens.

Who calls it: the server (desired state), the controller (status, events). Synchronous and
thread-safe (one short transaction per call); never holds a transaction across I/O.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, cast

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    and_,
    bindparam,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from aipaas.api.event import Event
from aipaas.api.meta import Object
from aipaas.api.registry import KINDS
from aipaas.clock import Clock, SystemClock, isoformat
from aipaas.errors import AlreadyExists, Conflict, NotFound
from aipaas.store import tables
from aipaas.store.batch import GroupCommit
from aipaas.store.bulk import insert_rows, rows_with_keys, update_rows
from aipaas.store.database import make_engine, migrate
from aipaas.store.paging import Page
from aipaas.store.writers import WriterQueue

# Statements of the hot paths, built once: building a statement costs more than running it.
_SELECT_ONE = select(tables.objects).where(
    tables.objects.c.kind == bindparam("b_kind"),
    tables.objects.c.tenant == bindparam("b_tenant"),
    tables.objects.c.name == bindparam("b_name"),
)
_INSERT_OBJECT = insert(tables.objects)
_INSERT_EVENT = insert(tables.events)
_FIND_TOKEN = select(tables.tokens).where(tables.tokens.c.token_hash == bindparam("b_hash"))
_SELECT_UID = select(tables.objects).where(tables.objects.c.uid == bindparam("b_uid"))


ObjectKey = tuple[str, str, str]


T = TypeVar("T")


@dataclass(frozen=True)
class TokenRecord:
    """A token as stored, without its hash. ``user`` and ``tenant`` are the owner's at
    creation, for listing; ``owner_uid`` is who it belongs to."""

    id: str
    name: str
    owner_uid: str
    user: str
    tenant: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None


class Store:
    """Persistence for every object. Tenant "" holds cluster-wide kinds (Tenant, Node)."""

    def __init__(self, engine: Engine, clock: Clock | None = None) -> None:
        self.engine = engine
        self.clock = clock or SystemClock()
        self._writers = WriterQueue.for_engine(engine)
        self._group_commit = GroupCommit(self.transaction, look_up=self._find_each_now)

    @classmethod
    def open(cls, url: str, clock: Clock | None = None) -> Store:
        engine = make_engine(url)
        migrate(engine)
        return cls(engine, clock)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Connection]:
        with (
            self._writers.turn() if write else nullcontext(),
            self.engine.connect().execution_options(immediate=write) as conn,
            conn.begin(),
        ):
            yield conn

    def write_together(
        self, write: Callable[[Connection], T], lookups: Sequence[ObjectKey] = ()
    ) -> T:
        """Run ``write`` in a transaction shared with the writes of other threads waiting now
        (group commit, see batch.py); it must touch nothing but the connection it is given.
        ``lookups``: the keys it will ask ``find_each``, asked for the whole batch at once;
        a write that names them must change nothing but with ``later=True`` inserts."""
        return self._group_commit.run(write, lookups)

    async def write_together_async(
        self, write: Callable[[Connection], T], lookups: Sequence[ObjectKey] = ()
    ) -> T:
        """``write_together`` for a coroutine: it waits without holding a thread."""
        return await asyncio.wrap_future(self._group_commit.submit(write, lookups))

    def close(self) -> None:
        self._group_commit.close()
        self._writers.close()
        self.engine.dispose()

    # objects ------------------------------------------------------------------------------

    def create(self, obj: Object, *, conn: Connection | None = None, later: bool = False) -> Object:
        """Insert a new object; its uid, resourceVersion and creation time are set here.

        ``later`` (inside ``write_together``): the insert goes with the batch's others at its
        end, where a duplicate name fails the batch and the one-by-one rerun says AlreadyExists.
        """
        now = self.clock.now()
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
            "phase": _phase(stored),
            "body": _body(stored),
            "status": _status(stored),
            "created_at": now,
            "updated_at": now,
        }
        try:
            if conn is None:
                with self.transaction() as tx:
                    tx.execute(_INSERT_OBJECT, row)
            elif later:
                self._group_commit.insert_later(conn, tables.objects, row)
            else:
                conn.execute(_INSERT_OBJECT, row)
        except IntegrityError as err:
            raise AlreadyExists(
                f"{_describe(obj.kind, obj.tenant, obj.name)} already exists"
            ) from err
        # The controller in this process lists it soon: it need not parse what was just
        # validated (a uid that never commits is never looked up; the rerun makes a new one).
        _remember(stored)
        return stored

    def get(self, kind: str, tenant: str, name: str, *, conn: Connection | None = None) -> Object:
        key = {"b_kind": kind, "b_tenant": tenant, "b_name": name}
        if conn is None:
            with self.transaction(write=False) as tx:
                row = tx.execute(_SELECT_ONE, key).mappings().first()
        else:
            row = conn.execute(_SELECT_ONE, key).mappings().first()
        if row is None:
            raise NotFound(f"{_describe(kind, tenant, name)} not found")
        return _to_object(row)

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
        prefetched = self._group_commit.prefetched(keys)
        if prefetched is not None:
            return prefetched
        return self._find_each_now(conn, keys)

    @staticmethod
    def _find_each_now(conn: Connection, keys: Sequence[ObjectKey]) -> dict[ObjectKey, Object]:
        rows = rows_with_keys(conn, tables.objects, ("kind", "tenant", "name"), keys)
        found = (_to_object(row) for row in rows)
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
        with self.transaction(write=False) as tx:
            versions = tx.execute(light).all()
            parsed = _PARSED
            listed = [parsed.get((uid, int(version))) for _, uid, version in versions]
            missing = [row[0] for row, obj in zip(versions, listed, strict=True) if obj is None]
            if not missing:  # the common case: one pass, in order
                return cast("list[Object]", listed)
            found: dict[int, Object] = {}
            for first in range(0, len(missing), _BODY_CHUNK):
                chunk = missing[first : first + _BODY_CHUNK]
                full = select(objects).where(objects.c.id.in_(chunk))
                for row in tx.execute(full).mappings():
                    found[row["id"]] = _to_object(row)
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
        with self.transaction(write=False) as tx:
            rows = tx.execute(query, {"b_after": after}).mappings().all()
            more = len(rows) > limit
            rows = rows[:limit]
            last = int(rows[-1]["id"]) if more else None
            remaining = _count_after(tx, objects, where, last) if last is not None else None
        return Page([_to_object(row) for row in rows], last, remaining)

    def find_by_name(self, kind: str, name: str) -> list[Object]:
        """Objects of a kind with this name, in any tenant."""
        query = select(tables.objects).where(
            tables.objects.c.kind == kind, tables.objects.c.name == name
        )
        with self.transaction(write=False) as tx:
            rows = tx.execute(query).mappings().all()
        return [_to_object(row) for row in rows]

    def count(self, kind: str, tenant: str | None = None) -> int:
        query = (
            select(func.count()).select_from(tables.objects).where(tables.objects.c.kind == kind)
        )
        if tenant is not None:
            query = query.where(tables.objects.c.tenant == tenant)
        with self.transaction(write=False) as tx:
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
        with self.transaction(write=False) as tx:
            return {str(row[0]): tuple(row[1:]) for row in tx.execute(query).all()}

    def count_by_phase(self, kind: str) -> dict[str, int]:
        query = (
            select(tables.objects.c.phase, func.count())
            .where(tables.objects.c.kind == kind)
            .group_by(tables.objects.c.phase)
        )
        with self.transaction(write=False) as tx:
            return {str(phase): int(n) for phase, n in tx.execute(query).all()}

    def update(self, obj: Object, *, expected_version: str | None = None) -> Object:
        """Replace metadata (labels, annotations) and spec; status is untouched.

        With ``expected_version`` the write happens only if the stored resourceVersion still
        equals it (else Conflict, HTTP 409).
        """
        with self.transaction() as tx:
            current = self.get(obj.kind, obj.tenant, obj.name, conn=tx)
            version = int(current.metadata.resource_version or 0)
            if expected_version is not None and expected_version != str(version):
                raise Conflict(
                    f"{_describe(obj.kind, obj.tenant, obj.name)} was modified: resourceVersion "
                    f"is {version}, not {expected_version}"
                )
            generation = current.metadata.generation or 1
            if _spec(obj) != _spec(current):
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
            with self.transaction() as tx:
                return self.update_status(obj, status, expected_version=expected_version, conn=tx)
        tx = conn
        current = self.get(obj.kind, obj.tenant, obj.name, conn=tx)
        version = int(current.metadata.resource_version or 0)
        if expected_version is not None and expected_version != str(version):
            raise Conflict(
                f"{_describe(obj.kind, obj.tenant, obj.name)} was modified: resourceVersion "
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
        now = self.clock.now()
        rows = [
            {
                "uid": obj.metadata.uid,
                "resource_version": int(obj.metadata.resource_version or 0),
                "phase": str(getattr(status, "phase", "") or ""),
                "status": _status_json(status),
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
                _remember_written(obj, status)
            return
        # Someone wrote a row in between (an annotation): set every status regardless.
        for row in rows:
            del row["resource_version"]
        update_rows(conn, tables.objects, rows, match=("uid",), increment=("resource_version",))

    def record_events(
        self, events: Sequence[tuple[Object, str, str, bool]], *, conn: Connection
    ) -> None:
        """Many ``(object, reason, message, warning)`` events in one statement."""
        now = self.clock.now()
        insert_rows(
            conn,
            tables.events,
            [
                {
                    "kind": obj.kind,
                    "tenant": obj.tenant,
                    "name": obj.name,
                    "uid": obj.metadata.uid or "",
                    "type": "Warning" if warning else "Normal",
                    "reason": reason,
                    "message": message,
                    "created_at": now,
                }
                for obj, reason, message, warning in events
            ],
        )

    def write_status(self, obj: Object, status: Any, *, conn: Connection) -> None:
        """The controller's fast path: set status and bump resourceVersion, without reading.

        Safe without CAS because the controller is the only writer of status, and the row's
        spec and metadata are left as they are.
        """
        dumped = _status_json(status)
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
                updated_at=self.clock.now(),
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
                phase=_phase(stored),
                body=_body(stored),
                status=_status(stored),
                updated_at=self.clock.now(),
            )
        )
        if result.rowcount != 1:
            raise Conflict(f"{_describe(stored.kind, stored.tenant, stored.name)} was modified")

    def delete(self, kind: str, tenant: str, name: str, *, conn: Connection | None = None) -> None:
        if conn is None:
            with self.transaction() as tx:
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
            raise NotFound(f"{_describe(kind, tenant, name)} not found")

    # events -------------------------------------------------------------------------------

    def record_event(
        self,
        obj: Object,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        conn: Connection | None = None,
        later: bool = False,
    ) -> None:
        """One event; ``later`` as in ``create``."""
        values = {
            "kind": obj.kind,
            "tenant": obj.tenant,
            "name": obj.name,
            "uid": obj.metadata.uid or "",
            "type": "Warning" if warning else "Normal",
            "reason": reason,
            "message": message,
            "created_at": self.clock.now(),
        }
        if conn is None:
            with self.transaction() as tx:
                tx.execute(_INSERT_EVENT, values)
        elif later:
            self._group_commit.insert_later(conn, tables.events, values)
        else:
            conn.execute(_INSERT_EVENT, values)

    def list_events(
        self,
        *,
        tenant: str | None = None,
        kind: str | None = None,
        name: str | None = None,
        uid: str | None = None,
        limit: int = 1000,
    ) -> list[Event]:
        query = select(tables.events)
        if tenant is not None:
            query = query.where(tables.events.c.tenant == tenant)
        if kind is not None:
            query = query.where(tables.events.c.kind == kind)
        if name is not None:
            query = query.where(tables.events.c.name == name)
        if uid is not None:
            query = query.where(tables.events.c.uid == uid)
        query = query.order_by(tables.events.c.id.desc()).limit(limit)
        with self.transaction(write=False) as tx:
            rows = tx.execute(query).mappings().all()
        return [_event(row) for row in reversed(rows)]

    def events_page(
        self,
        *,
        tenant: str | None = None,
        kind: str | None = None,
        name: str | None = None,
        uid: str | None = None,
        limit: int,
        after: int = 0,
    ) -> Page[Event]:
        """At most ``limit`` events after row id ``after``, oldest first."""
        events = tables.events
        where = [events.c.id > bindparam("b_after")]
        for column, value in (("tenant", tenant), ("kind", kind), ("name", name), ("uid", uid)):
            if value is not None:
                where.append(events.c[column] == value)
        query = select(events).where(*where).order_by(events.c.id).limit(limit + 1)
        with self.transaction(write=False) as tx:
            rows = tx.execute(query, {"b_after": after}).mappings().all()
            more = len(rows) > limit
            rows = rows[:limit]
            last = int(rows[-1]["id"]) if more else None
            remaining = _count_after(tx, events, where, last) if last is not None else None
        return Page([_event(row) for row in rows], last, remaining)

    # tokens -------------------------------------------------------------------------------

    def add_token(
        self,
        token_hash: str,
        public_id: str,
        owner: Object,
        *,
        name: str = "",
        expires_at: datetime | None = None,
        created_at: datetime | None = None,
    ) -> TokenRecord:
        """A new token of ``owner`` (a User): it acts with that user's role, whatever it is."""
        values = {
            "token_hash": token_hash,
            "public_id": public_id,
            "name": name,
            "owner_uid": owner.metadata.uid or "",
            "user": owner.name,
            "tenant": owner.tenant,
            "created_at": created_at or self.clock.now(),
            "expires_at": expires_at,
        }
        with self.transaction() as tx:
            tx.execute(insert(tables.tokens).values(values))
        return _token({**values, "last_used_at": None, "revoked_at": None})

    def find_token(self, token_hash: str) -> TokenRecord | None:
        with self.transaction(write=False) as tx:
            row = tx.execute(_FIND_TOKEN, {"b_hash": token_hash}).mappings().first()
        return None if row is None else _token(row)

    def token_and_owner(self, token_hash: str) -> tuple[TokenRecord, Object | None] | None:
        """The token of this hash and the object of its owner's uid (None when it is gone)."""
        with self.transaction(write=False) as tx:
            row = tx.execute(_FIND_TOKEN, {"b_hash": token_hash}).mappings().first()
            if row is None:
                return None
            owner = (
                tx.execute(_SELECT_UID, {"b_uid": row["owner_uid"]}).mappings().first()
                if row["owner_uid"]
                else None
            )
        return _token(row), None if owner is None else _to_object(owner)

    def get_token(self, public_id: str) -> TokenRecord | None:
        query = select(tables.tokens).where(tables.tokens.c.public_id == public_id)
        with self.transaction(write=False) as tx:
            row = tx.execute(query).mappings().first()
        return None if row is None else _token(row)

    def list_tokens(
        self, *, tenant: str | None = None, owner_uid: str | None = None
    ) -> list[TokenRecord]:
        """Tokens, oldest first; of one tenant and/or one owner when given."""
        query = select(tables.tokens).order_by(tables.tokens.c.id)
        if tenant is not None:
            query = query.where(tables.tokens.c.tenant == tenant)
        if owner_uid is not None:
            query = query.where(tables.tokens.c.owner_uid == owner_uid)
        with self.transaction(write=False) as tx:
            return [_token(row) for row in tx.execute(query).mappings()]

    def tokens_page(
        self,
        *,
        limit: int,
        after: int = 0,
        tenant: str | None = None,
        owner_uid: str | None = None,
    ) -> Page[TokenRecord]:
        """At most ``limit`` tokens after row id ``after``, oldest first (the API's list)."""
        tokens = tables.tokens
        where = [tokens.c.id > bindparam("b_after")]
        if tenant is not None:
            where.append(tokens.c.tenant == tenant)
        if owner_uid is not None:
            where.append(tokens.c.owner_uid == owner_uid)
        query = select(tokens).where(*where).order_by(tokens.c.id).limit(limit + 1)
        with self.transaction(write=False) as tx:
            rows = tx.execute(query, {"b_after": after}).mappings().all()
            more = len(rows) > limit
            rows = rows[:limit]
            last = int(rows[-1]["id"]) if more else None
            remaining = _count_after(tx, tokens, where, last) if last is not None else None
        return Page([_token(row) for row in rows], last, remaining)

    def touch_token(self, public_id: str, when: datetime) -> None:
        """Record a use (the caller writes at most once a minute per token)."""
        query = (
            update(tables.tokens)
            .where(tables.tokens.c.public_id == public_id)
            .values(last_used_at=when)
        )
        with self.transaction() as tx:
            tx.execute(query)

    def revoke_token(self, public_id: str, when: datetime) -> bool:
        """Revoke one token; False when it was revoked already."""
        query = (
            update(tables.tokens)
            .where(tables.tokens.c.public_id == public_id, tables.tokens.c.revoked_at.is_(None))
            .values(revoked_at=when)
        )
        with self.transaction() as tx:
            return bool(tx.execute(query).rowcount)

    def revoke_tokens_of(self, owner_uid: str, when: datetime, *, conn: Connection) -> int:
        """Revoke every live token of one owner, in the caller's transaction."""
        query = (
            update(tables.tokens)
            .where(tables.tokens.c.owner_uid == owner_uid, tables.tokens.c.revoked_at.is_(None))
            .values(revoked_at=when)
        )
        return int(conn.execute(query).rowcount)

    def adopt_tokens(self, owner: Object) -> int:
        """Give ``owner`` the unrevoked tokens that have no owner (the bootstrap token of a
        database from before tokens had owners, see migration 0003)."""
        query = (
            update(tables.tokens)
            .where(tables.tokens.c.owner_uid == "", tables.tokens.c.revoked_at.is_(None))
            .values(owner_uid=owner.metadata.uid or "", user=owner.name, tenant=owner.tenant)
        )
        with self.transaction() as tx:
            return int(tx.execute(query).rowcount)

    def count_tokens(self) -> int:
        with self.transaction(write=False) as tx:
            return int(tx.execute(select(func.count()).select_from(tables.tokens)).scalar_one())


def _count_after(conn: Connection, table: Table, where: list[Any], last: int) -> int:
    """Rows matching ``where`` (its ``id > b_after`` included) after row id ``last``."""
    query = select(func.count()).select_from(table).where(*where)
    return int(conn.execute(query, {"b_after": last}).scalar_one())


def _event(row: Any) -> Event:
    return Event(
        kind=row["kind"],
        tenant=row["tenant"],
        name=row["name"],
        type=row["type"],
        reason=row["reason"],
        message=row["message"],
        timestamp=isoformat(row["created_at"]),
    )


def _describe(kind: str, tenant: str, name: str) -> str:
    return f"{kind.lower()} {name}"


def _spec(obj: Object) -> Any:
    return obj.model_dump(mode="json", include={"spec"})


def _phase(obj: Object) -> str:
    status = getattr(obj, "status", None)
    phase = getattr(status, "phase", None) if status is not None else None
    return str(phase) if phase is not None else ""


def _body(obj: Object) -> str:
    wire = obj.to_wire()
    wire.pop("status", None)
    return json.dumps(wire, separators=(",", ":"))


def _status(obj: Object) -> str | None:
    status = getattr(obj, "status", None)
    if status is None:
        return None
    return _status_json(status)


def _status_json(status: Any) -> str:
    """A status as stored: compact JSON by wire names, written by pydantic's own serialiser."""
    return str(status.model_dump_json(by_alias=True))


_PARSED: dict[tuple[str, int], Object] = {}
_PARSED_MAX = 20_000


#: bodies read per statement when a listing reads the objects it has not parsed yet
_BODY_CHUNK = 500


def row_object(row: Any) -> Object:
    """The object of a row of the objects table read elsewhere in store/ (store/changes.py)."""
    return _to_object(row)


def _to_object(row: Any) -> Object:
    """The object of a row; parsed once per (uid, resourceVersion), since every write bumps it.

    The controller lists every unfinished job each cycle: most have not changed since the last.
    Callers never mutate what they get (they copy with ``model_copy``).
    """
    key = (row["uid"], int(row["resource_version"]))
    cached = _PARSED.get(key)
    if cached is not None:
        return cached
    parsed = _parse(row)
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[key] = parsed
    return parsed


def _remember(obj: Object) -> None:
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[(obj.metadata.uid or "", int(obj.metadata.resource_version or 0))] = obj


def _remember_written(obj: Object, status: Any) -> None:
    version = int(obj.metadata.resource_version or 0) + 1
    meta = obj.metadata.model_copy(update={"resource_version": str(version)})
    _remember(obj.model_copy(update={"metadata": meta, "status": status}))


def _parse(row: Any) -> Object:
    data = json.loads(row["body"])
    data["metadata"]["resourceVersion"] = str(row["resource_version"])
    data["metadata"]["generation"] = row["generation"]
    if row["status"] is not None:
        data["status"] = json.loads(row["status"])
    return KINDS[row["kind"]].model_validate(data)


def _token(row: Any) -> TokenRecord:
    return TokenRecord(
        id=row["public_id"],
        name=row["name"],
        owner_uid=row["owner_uid"],
        user=row["user"],
        tenant=row["tenant"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        last_used_at=row["last_used_at"],
        revoked_at=row["revoked_at"],
    )
