"""The newest events, newest first, for the dashboard's alerts page (GET /api/v1/events pages
oldest first: the newest would take reading every page before them)."""

from __future__ import annotations

from typing import Any

from aipaas.store import Store


def newest_events(
    store: Store, tenant: str | None, event_type: str | None, limit: int
) -> list[dict[str, Any]]:
    """At most ``limit`` events of ``tenant`` (None: all), of ``event_type`` if given."""
    return [
        {
            "kind": event.kind,
            "tenant": event.tenant,
            "name": event.name,
            "type": event.type,
            "reason": event.reason,
            "message": event.message,
            "timestamp": event.timestamp,
        }
        for event in store.events.newest(tenant=tenant, event_type=event_type, limit=limit)
    ]
