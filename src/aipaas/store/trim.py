"""Trimming of the events table by age and by count, a bounded batch at a time.

Who calls it: the controller loop of the process that holds the lease, once per ``interval``
(see ``EventTrim``). Each round is one DELETE that looks at no more than ``batch`` of the
oldest rows (by primary key): events are written in time order, so the oldest ids are the
oldest events, and the table needs no index on its time column for this.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, or_, select

from aipaas.store import tables
from aipaas.store.store import Store

log = logging.getLogger("aipaas.store.trim")

DEFAULT_BATCH = 10_000
MAX_ROUNDS = 10  # per call: a backlog is worked off over several calls, never in one long stall


@dataclass(frozen=True)
class EventLimits:
    max_age_seconds: float
    max_count: int
    batch: int = DEFAULT_BATCH


def trim_events(store: Store, limits: EventLimits) -> int:
    """Delete the events older than ``max_age_seconds`` or beyond the newest ``max_count``;
    at most ``batch`` rows a round and ``MAX_ROUNDS`` rounds. Returns how many went."""
    events = tables.events
    cutoff = store.clock.now() - timedelta(seconds=limits.max_age_seconds)
    oldest = select(events.c.id).order_by(events.c.id).limit(limits.batch)
    # The id of the newest event beyond the count limit (NULL when there are fewer events).
    beyond = (
        select(events.c.id)
        .order_by(events.c.id.desc())
        .offset(limits.max_count)
        .limit(1)
        .scalar_subquery()
    )
    statement = delete(events).where(
        events.c.id.in_(oldest.scalar_subquery()),
        or_(events.c.created_at < cutoff, events.c.id <= beyond),
    )
    removed = 0
    for _ in range(MAX_ROUNDS):
        with store.transaction() as tx:
            count = int(tx.execute(statement).rowcount or 0)
        removed += count
        if count < limits.batch:
            break
    return removed


class EventTrim:
    """``trim_events`` at most once per ``interval`` seconds: a hook the controller loop calls
    after each cycle (cheap when it is not yet time)."""

    def __init__(self, store: Store, limits: EventLimits, interval: float = 60.0) -> None:
        self.store = store
        self.limits = limits
        self.interval = interval
        self._next = 0.0

    def __call__(self) -> None:
        now = self.store.clock.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval
        removed = trim_events(self.store, self.limits)
        if removed:
            log.info("trimmed %d events", removed)
