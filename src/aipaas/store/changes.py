"""What changed since a point: the reads behind the API's watch streams (server/watch*.py).

Objects carry a per-object resourceVersion, not a global one, so a watch resumes from a time
(objects updated after it) and follows events by their row id (unique and growing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from aipaas.api.meta import Object
from aipaas.clock import isoformat
from aipaas.store import tables
from aipaas.store.store import Store, row_object


@dataclass(frozen=True)
class Deletion:
    """An object named by a deletion event (reason Deleted or DeleteRequested)."""

    kind: str
    tenant: str
    name: str
    uid: str


@dataclass(frozen=True)
class NumberedEvent:
    """An event with its row id: a follower asks for those after the last id it saw."""

    id: int
    kind: str
    tenant: str
    name: str
    type: str
    reason: str
    message: str
    timestamp: str

    def to_wire(self) -> dict[str, object]:
        return {
            "id": self.id,
            "kind": self.kind,
            "tenant": self.tenant,
            "name": self.name,
            "type": self.type,
            "reason": self.reason,
            "message": self.message,
            "timestamp": self.timestamp,
        }


DELETION_REASONS = ("Deleted", "DeleteRequested")


def updated_since(store: Store, kind: str, since: datetime) -> set[str]:
    """The uids of objects of ``kind`` updated (or created) after ``since``; the caller keeps
    only those it may see."""
    objects = tables.objects
    query = select(objects.c.uid).where(objects.c.kind == kind, objects.c.updated_at > since)
    with store.transaction(write=False) as tx:
        return {str(uid) for (uid,) in tx.execute(query)}


def changed_since(store: Store, kind: str, since: datetime) -> tuple[list[Object], datetime]:
    """The objects of ``kind`` updated (or created) after ``since``, and the newest update time
    among them (``since`` when there is none): the change feed's read (server/watch_feed.py)."""
    objects = tables.objects
    query = (
        select(objects)
        .where(objects.c.kind == kind, objects.c.updated_at > since)
        .order_by(objects.c.updated_at)
    )
    with store.transaction(write=False) as tx:
        rows = tx.execute(query).mappings().all()
    newest = max((row["updated_at"] for row in rows), default=since)
    return [row_object(row) for row in rows], newest


def uids_of(store: Store, kind: str) -> set[str]:
    """The uids of every object of ``kind`` (one column of one index): the change feed tells
    deletions from the difference between two reads."""
    objects = tables.objects
    with store.transaction(write=False) as tx:
        return {
            str(uid) for (uid,) in tx.execute(select(objects.c.uid).where(objects.c.kind == kind))
        }


def deletions_since(store: Store, kind: str, since: datetime) -> list[Deletion]:
    """Objects of ``kind`` that deletion events named after ``since``, oldest first."""
    events = tables.events
    query = (
        select(events.c.kind, events.c.tenant, events.c.name, events.c.uid)
        .where(
            events.c.kind == kind,
            events.c.reason.in_(DELETION_REASONS),
            events.c.created_at > since,
        )
        .order_by(events.c.id)
    )
    with store.transaction(write=False) as tx:
        return [Deletion(*row) for row in tx.execute(query)]


def events_after(
    store: Store,
    after: int,
    *,
    tenants: Sequence[str] | None,
    kind: str | None = None,
    name: str | None = None,
    limit: int = 500,
) -> list[NumberedEvent]:
    """Up to ``limit`` events with a row id above ``after``, oldest first; in ``tenants`` only
    (None: every tenant)."""
    events = tables.events
    query = select(events).where(events.c.id > after)
    if tenants is not None:
        query = query.where(events.c.tenant.in_(list(tenants)))
    if kind is not None:
        query = query.where(events.c.kind == kind)
    if name is not None:
        query = query.where(events.c.name == name)
    query = query.order_by(events.c.id).limit(limit)
    with store.transaction(write=False) as tx:
        rows = tx.execute(query).mappings().all()
    return [
        NumberedEvent(
            id=int(row["id"]),
            kind=row["kind"],
            tenant=row["tenant"],
            name=row["name"],
            type=row["type"],
            reason=row["reason"],
            message=row["message"],
            timestamp=isoformat(row["created_at"]),
        )
        for row in rows
    ]
