"""The newest events, newest first, for the dashboard's alerts page (GET /api/v1/events pages
oldest first: the newest would take reading every page before them)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from aipaas.clock import isoformat
from aipaas.store import Store, tables


def newest_events(
    store: Store, tenant: str | None, event_type: str | None, limit: int
) -> list[dict[str, Any]]:
    """At most ``limit`` events of ``tenant`` (None: all), of ``event_type`` if given."""
    events = tables.events
    query = select(events).order_by(events.c.id.desc()).limit(limit)
    if tenant is not None:
        query = query.where(events.c.tenant == tenant)
    if event_type is not None:
        query = query.where(events.c.type == event_type)
    with store.transaction(write=False) as tx:
        rows = tx.execute(query).mappings().all()
    return [
        {
            "kind": row["kind"],
            "tenant": row["tenant"],
            "name": row["name"],
            "type": row["type"],
            "reason": row["reason"],
            "message": row["message"],
            "timestamp": isoformat(row["created_at"]),
        }
        for row in rows
    ]
