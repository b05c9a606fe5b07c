"""The usage ledger's entries by time window: what cost (metering/cost_ledger.py), the cost
cache of budget evaluations (metering/cost_cache.py) and the dashboard's allocation timeline
(server/dashboard_timeline.py) read. store/ledger.py writes the ledger and pages it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, or_, select

from aipaas.store import tables
from aipaas.store.ledger import ATTEMPT, CORRECTION, LedgerEntry, entry_of
from aipaas.store.store import Store


@dataclass(frozen=True)
class AttemptSpan:
    """When one attempt ran, where, and with what share of GPUs and CPUs (thousandths)."""

    tenant: str
    queue: str
    started_at: datetime
    ended_at: datetime
    gpu_milli: int
    cpu_milli: int


def entries_overlapping(
    store: Store, tenant: str | None, since: datetime, until: datetime
) -> list[LedgerEntry]:
    """Attempts that ran some of [since, until) and corrections recorded in it, of ``tenant``
    (None: all), in the order they were entered."""
    table = tables.usage_ledger
    query = select(table).where(
        or_(
            and_(
                table.c.kind == ATTEMPT,
                table.c.started_at < until,
                table.c.ended_at > since,
            ),
            and_(
                table.c.kind == CORRECTION,
                table.c.recorded_at >= since,
                table.c.recorded_at < until,
            ),
        )
    )
    if tenant is not None:
        query = query.where(table.c.tenant == tenant)
    with store.transaction(write=False) as tx:
        return [entry_of(row) for row in tx.execute(query.order_by(table.c.id)).mappings()]


def entries_entered_since(
    store: Store, tenant: str, since: datetime, after: int
) -> tuple[list[LedgerEntry], int]:
    """The tenant's entries with an id above ``after`` that count from ``since`` on, and the
    highest id read (of any entry, counted or not)."""
    table = tables.usage_ledger
    query = (
        select(table)
        .where(
            table.c.id > after,
            table.c.tenant == tenant,
            or_(
                and_(table.c.kind == ATTEMPT, table.c.ended_at > since),
                and_(table.c.kind == CORRECTION, table.c.recorded_at >= since),
            ),
        )
        .order_by(table.c.id)
    )
    top = select(table.c.id).where(table.c.id > after).order_by(table.c.id.desc()).limit(1)
    with store.transaction(write=False) as tx:
        # The highest id first: an entry entered while the rows are read is read next time.
        highest = tx.execute(top).scalar()
        query = query.where(table.c.id <= (highest or after))
        entries = [entry_of(row) for row in tx.execute(query).mappings()]
    return entries, int(highest or after)


def attempts_ended_since(
    store: Store, tenant: str | None, since: datetime, limit: int
) -> list[AttemptSpan]:
    """At most ``limit`` attempts of ``tenant`` (None: all) that ended at or after ``since``,
    the latest ended first."""
    table = tables.usage_ledger
    query = (
        select(
            table.c.tenant,
            table.c.queue,
            table.c.started_at,
            table.c.ended_at,
            table.c.gpu_milli,
            table.c.cpu_milli,
        )
        .where(table.c.kind == ATTEMPT, table.c.ended_at >= since)
        .order_by(table.c.ended_at.desc())
        .limit(limit)
    )
    if tenant is not None:
        query = query.where(table.c.tenant == tenant)
    with store.transaction(write=False) as tx:
        rows = tx.execute(query).all()
    return [
        AttemptSpan(str(r[0]), str(r[1]), r[2], r[3], int(r[4]), int(r[5]))
        for r in rows
        if r[2] is not None and r[3] is not None
    ]
