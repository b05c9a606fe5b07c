"""The events table: what happened to an object, by whom, newest last. Reached as
``store.events`` (store/store.py); the Store's own methods of the same names hand over to it.
The dashboard's recent events and the budget alerts' queries over events are here too, so that
no SQL lives outside store/.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, func, insert, select

from aipaas.api.event import Event
from aipaas.api.meta import Object
from aipaas.clock import isoformat
from aipaas.store import tables
from aipaas.store.bulk import insert_rows
from aipaas.store.paging import Page
from aipaas.store.rows import count_after

if TYPE_CHECKING:
    from aipaas.store.store import Store

_INSERT_EVENT = insert(tables.events)
#: values per IN (...) list: bounded, as databases bound a statement's parameters
_IN_CHUNK = 500


class EventRepository:
    def __init__(self, store: Store) -> None:
        self._store = store  # its transactions, clock and group commit

    def record_events(
        self, events: Sequence[tuple[Object, str, str, bool]], *, conn: Connection
    ) -> None:
        """Many ``(object, reason, message, warning)`` events in one statement."""
        now = self._store.clock.now()
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
            "created_at": self._store.clock.now(),
        }
        if conn is None:
            with self._store.transaction() as tx:
                tx.execute(_INSERT_EVENT, values)
        elif later:
            self._store.group_commit.insert_later(conn, tables.events, values)
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
        with self._store.transaction(write=False) as tx:
            rows = tx.execute(query).mappings().all()
        return [event_of(row) for row in reversed(rows)]

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
        with self._store.transaction(write=False) as tx:
            rows = tx.execute(query, {"b_after": after}).mappings().all()
            more = len(rows) > limit
            rows = rows[:limit]
            last = int(rows[-1]["id"]) if more else None
            remaining = count_after(tx, events, where, last) if last is not None else None
        return Page([event_of(row) for row in rows], last, remaining)

    def newest(
        self, *, tenant: str | None = None, event_type: str | None = None, limit: int
    ) -> list[Event]:
        """At most ``limit`` events, newest first, of ``tenant`` and ``event_type`` when given
        (the dashboard's alerts page: ``events_page`` goes oldest first)."""
        events = tables.events
        query = select(events).order_by(events.c.id.desc()).limit(limit)
        if tenant is not None:
            query = query.where(events.c.tenant == tenant)
        if event_type is not None:
            query = query.where(events.c.type == event_type)
        with self._store.transaction(write=False) as tx:
            rows = tx.execute(query).mappings().all()
        return [event_of(row) for row in rows]

    def uids_with_reason(self, reason: str, uids: Iterable[str]) -> set[str]:
        """The uids among ``uids`` whose objects have had an event of ``reason``."""
        wanted = sorted(set(uids))
        if not wanted:
            return set()
        events = tables.events
        found: set[str] = set()
        with self._store.transaction(write=False) as tx:
            for first in range(0, len(wanted), _IN_CHUNK):
                query = select(events.c.uid).where(
                    events.c.reason == reason, events.c.uid.in_(wanted[first : first + _IN_CHUNK])
                )
                found.update(str(uid) for uid in tx.execute(query.distinct()).scalars())
        return found

    def latest_reasons(
        self, kind: str, names: Iterable[str], reasons: Sequence[str]
    ) -> dict[str, str]:
        """Per name among ``names`` (cluster-wide objects of ``kind``), the reason of its
        latest event among ``reasons``; names with none are left out."""
        events = tables.events
        wanted = sorted(set(names))
        if not wanted:
            return {}
        latest = (
            select(events.c.name, func.max(events.c.id).label("last"))
            .where(
                events.c.kind == kind,
                events.c.reason.in_(list(reasons)),
                events.c.name.in_(wanted),
            )
            .group_by(events.c.name)
            .subquery()
        )
        query = select(events.c.name, events.c.reason).join(latest, events.c.id == latest.c.last)
        with self._store.transaction(write=False) as tx:
            return {str(name): str(reason) for name, reason in tx.execute(query)}


def event_of(row: Any) -> Event:
    return Event(
        kind=row["kind"],
        tenant=row["tenant"],
        name=row["name"],
        type=row["type"],
        reason=row["reason"],
        message=row["message"],
        timestamp=isoformat(row["created_at"]),
    )
