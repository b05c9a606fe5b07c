"""The usage ledger: append-only entries of GPU-, CPU- and memory-hours.

The controller enters each task attempt that ran, in the transaction that records its end
(``insert_entries``; an attempt seen again is entered once). A platform admin corrects an entry
with an entry of its own (``add_correction``). Nothing updates or deletes an entry: usage
outlives the job, the queue and the user it is attributed to.

Who calls it: metering/usage.py (the controller's hook, the report: ``totals``) and the server's
usage routes (``entries_page``, ``add_correction``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Final

from sqlalchemy import Connection, case, func, insert, select
from sqlalchemy.dialects import postgresql, sqlite

from aipaas.errors import NotFound
from aipaas.store import tables
from aipaas.store.paging import Page
from aipaas.store.store import Store

ATTEMPT: Final = "attempt"
CORRECTION: Final = "correction"


@dataclass(frozen=True)
class LedgerEntry:
    kind: str  # ATTEMPT or CORRECTION
    tenant: str
    queue: str
    user: str
    job_name: str
    job_uid: str
    task: str
    attempt: int
    gpu_model: str
    gpu_milli: int  # GPUs x their share, in thousandths
    cpu_milli: int
    memory_mib: int
    started_at: datetime | None
    ended_at: datetime | None
    gpu_hours: float
    cpu_hours: float
    memory_gib_hours: float
    recorded_by: str
    recorded_at: datetime
    attempt_key: str | None = None
    corrects: int | None = None
    reason: str = ""
    id: int | None = None  # set once stored


@dataclass(frozen=True)
class Total:
    """The sums of the entries of one tenant, queue, user and GPU model."""

    tenant: str
    queue: str
    user: str
    gpu_model: str
    gpu_hours: float
    cpu_hours: float
    memory_gib_hours: float
    tasks: int  # attempts entered (corrections count none)


_COLUMNS: Final = tuple(f.name for f in fields(LedgerEntry) if f.name != "id")


def insert_entries(conn: Connection, entries: list[LedgerEntry]) -> None:
    """Append ``entries``; one whose ``attempt_key`` is entered already is left out."""
    if not entries:
        return
    rows = [{column: getattr(entry, column) for column in _COLUMNS} for entry in entries]
    table = tables.usage_ledger
    if conn.dialect.name == "postgresql":
        conn.execute(postgresql.insert(table).on_conflict_do_nothing(), rows)
    elif conn.dialect.name == "sqlite":
        conn.execute(sqlite.insert(table).on_conflict_do_nothing(), rows)
    else:  # no portable "insert unless present": ask first (one writer holds the lease)
        keys = [row["attempt_key"] for row in rows if row["attempt_key"] is not None]
        known = set(
            conn.execute(select(table.c.attempt_key).where(table.c.attempt_key.in_(keys))).scalars()
        )
        rows = [row for row in rows if row["attempt_key"] not in known]
        if rows:
            conn.execute(insert(table), rows)


def add_correction(store: Store, correction: LedgerEntry) -> LedgerEntry:
    """Append a correction of entry ``correction.corrects``; it is attributed as that entry is
    (tenant, queue, user, job, task, GPU model). Raises NotFound for an unknown entry."""
    with store.transaction() as tx:
        corrected = _get(tx, correction.corrects or 0)
        if corrected is None:
            raise NotFound(f"usage entry {correction.corrects} not found")
        attributed = {
            name: getattr(corrected, name)
            for name in (
                "tenant",
                "queue",
                "user",
                "job_name",
                "job_uid",
                "task",
                "attempt",
                "gpu_model",
            )
        }
        entry = LedgerEntry(
            **{
                **{column: getattr(correction, column) for column in _COLUMNS},
                **attributed,
                "kind": CORRECTION,
                "attempt_key": None,
            }
        )
        row = {column: getattr(entry, column) for column in _COLUMNS}
        new_id = tx.execute(insert(tables.usage_ledger).returning(tables.usage_ledger.c.id), row)
        stored = _get(tx, int(new_id.scalar_one()))
    assert stored is not None
    return stored


def get_entry(store: Store, entry_id: int) -> LedgerEntry | None:
    with store.transaction(write=False) as tx:
        return _get(tx, entry_id)


def list_entries(
    store: Store, tenant: str | None = None, *, after: int = 0, limit: int | None = None
) -> list[LedgerEntry]:
    """Entries in the order they were entered (of one tenant, or all), from id ``after`` on."""
    table = tables.usage_ledger
    query = select(table).where(table.c.id > after).order_by(table.c.id)
    if tenant is not None:
        query = query.where(table.c.tenant == tenant)
    if limit is not None:
        query = query.limit(limit)
    with store.transaction(write=False) as tx:
        rows = tx.execute(query).mappings().all()
    return [_entry(row) for row in rows]


def entries_page(
    store: Store, tenant: str | None = None, *, after: int = 0, limit: int
) -> Page[LedgerEntry]:
    """At most ``limit`` entries after id ``after``, in order, with where the next page starts
    and how many entries follow it."""
    table = tables.usage_ledger
    where = [table.c.id > after]
    if tenant is not None:
        where.append(table.c.tenant == tenant)
    query = select(table).where(*where).order_by(table.c.id).limit(limit + 1)
    with store.transaction(write=False) as tx:
        rows = tx.execute(query).mappings().all()
        if len(rows) <= limit:
            return Page([_entry(row) for row in rows])
        rows = rows[:limit]
        last = int(rows[-1]["id"])
        rest = select(func.count()).select_from(table).where(*where[1:], table.c.id > last)
        remaining = int(tx.execute(rest).scalar_one())
    return Page([_entry(row) for row in rows], last, remaining)


def totals(store: Store, tenant: str | None = None) -> list[Total]:
    """The ledger summed in the database per (tenant, queue, user, GPU model), in that order:
    one row per group, however long the ledger is. A correction adds its hours to the group of
    what it corrects (it is attributed as that entry is) and counts no task."""
    table = tables.usage_ledger
    keys = (table.c.tenant, table.c.queue, table.c.user, table.c.gpu_model)
    query = select(
        *keys,
        func.sum(table.c.gpu_hours),
        func.sum(table.c.cpu_hours),
        func.sum(table.c.memory_gib_hours),
        func.sum(case((table.c.kind == CORRECTION, 0), else_=1)),
    ).group_by(*keys)
    if tenant is not None:
        query = query.where(table.c.tenant == tenant)
    with store.transaction(write=False) as tx:
        rows = tx.execute(query).all()
    # Sorted here, not by ORDER BY: databases collate text differently, Python one way.
    return sorted(
        (
            Total(
                str(row[0]),
                str(row[1]),
                str(row[2]),
                str(row[3]),
                gpu_hours=float(row[4]),
                cpu_hours=float(row[5]),
                memory_gib_hours=float(row[6]),
                tasks=int(row[7]),
            )
            for row in rows
        ),
        key=lambda t: (t.tenant, t.queue, t.user, t.gpu_model),
    )


def _get(conn: Connection, entry_id: int) -> LedgerEntry | None:
    table = tables.usage_ledger
    row = conn.execute(select(table).where(table.c.id == entry_id)).mappings().first()
    return None if row is None else _entry(row)


def entry_of(row: Any) -> LedgerEntry:
    """A ledger entry from its row (for readers that select rows of their own)."""
    return _entry(row)


def _entry(row: Any) -> LedgerEntry:
    values = {column: row[column] for column in _COLUMNS}
    return LedgerEntry(**values, id=row["id"])
