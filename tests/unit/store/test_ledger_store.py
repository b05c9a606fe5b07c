"""The usage ledger table on SQLite and PostgreSQL: append, once per attempt, corrections."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from aipaas.errors import NotFound
from aipaas.store import Store, tables
from aipaas.store.ledger import (
    ATTEMPT,
    CORRECTION,
    LedgerEntry,
    Total,
    add_correction,
    entries_page,
    get_entry,
    insert_entries,
    list_entries,
    totals,
)

START = datetime(2026, 1, 1, tzinfo=UTC)


def entry(tenant: str = "acme", task: str = "w-0", attempt: int = 0) -> LedgerEntry:
    return LedgerEntry(
        kind=ATTEMPT,
        tenant=tenant,
        queue="research",
        user="alice",
        job_name="train",
        job_uid="uid-1",
        task=task,
        attempt=attempt,
        gpu_model="H100",
        gpu_milli=4000,
        cpu_milli=2000,
        memory_mib=8192,
        started_at=START,
        ended_at=START + timedelta(hours=2),
        gpu_hours=8.0,
        cpu_hours=4.0,
        memory_gib_hours=16.0,
        recorded_by="controller",
        recorded_at=START + timedelta(hours=2),
        attempt_key=f"uid-1/{task}/{attempt}/{tenant}",
    )


def test_the_table_matches_its_migration(store: Store) -> None:
    with store.engine.connect() as conn:
        differences = compare_metadata(MigrationContext.configure(conn), tables.metadata)
    assert [d for d in differences if "usage_ledger" in repr(d)] == []


def test_an_attempt_is_entered_once(store: Store) -> None:
    with store.transaction() as tx:
        insert_entries(tx, [entry(), entry(task="w-1")])
    with store.transaction() as tx:
        insert_entries(tx, [entry(), entry(attempt=1)])
    got = list_entries(store)
    assert [(e.task, e.attempt) for e in got] == [("w-0", 0), ("w-1", 0), ("w-0", 1)]
    first = got[0]
    assert first.id is not None
    assert first.started_at is not None
    assert first.started_at.replace(tzinfo=UTC) == START
    assert (first.gpu_hours, first.memory_mib, first.corrects) == (8.0, 8192, None)


def test_entries_by_tenant_and_page(store: Store) -> None:
    with store.transaction() as tx:
        insert_entries(tx, [entry(), entry("globex"), entry(task="w-1")])
    assert [e.tenant for e in list_entries(store, "acme")] == ["acme", "acme"]
    first, *_ = list_entries(store, limit=1)
    assert [e.tenant for e in list_entries(store, after=first.id or 0)] == ["globex", "acme"]


def test_a_correction_names_what_it_corrects(store: Store) -> None:
    with store.transaction() as tx:
        insert_entries(tx, [entry()])
    (original,) = list_entries(store)
    asked = replace(
        entry("ignored"),
        kind=CORRECTION,
        attempt_key=None,
        corrects=original.id,
        reason="double count",
        gpu_hours=-8.0,
        recorded_by="admin",
    )
    made = add_correction(store, asked)
    assert made.id is not None and made.id > (original.id or 0)
    assert get_entry(store, made.id) == made
    assert (made.tenant, made.kind, made.corrects) == ("acme", CORRECTION, original.id)
    assert list_entries(store)[0] == original
    with pytest.raises(NotFound):
        add_correction(store, replace(asked, corrects=12345))
    assert len(list_entries(store)) == 2


def test_totals_sum_each_group_in_the_database(store: Store) -> None:
    with store.transaction() as tx:
        insert_entries(
            tx,
            [
                entry(),
                entry(task="w-1"),
                replace(entry(task="w-2"), gpu_model="A100", gpu_hours=1.5),
                entry("globex"),
            ],
        )
    (first, *_) = list_entries(store)
    fix = replace(entry(), kind=CORRECTION, attempt_key=None, corrects=first.id, gpu_hours=-8.0)
    add_correction(store, replace(fix, cpu_hours=0.0, memory_gib_hours=0.0, reason="double count"))
    assert totals(store, "acme") == [
        Total("acme", "research", "alice", "A100", 1.5, 4.0, 16.0, tasks=1),
        Total("acme", "research", "alice", "H100", 8.0, 8.0, 32.0, tasks=2),
    ]
    assert [(t.tenant, t.gpu_hours, t.tasks) for t in totals(store)] == [
        ("acme", 1.5, 1),
        ("acme", 8.0, 2),
        ("globex", 8.0, 1),
    ]
    assert totals(store, "nobody") == []


def test_entries_page(store: Store) -> None:
    with store.transaction() as tx:
        insert_entries(tx, [entry(), entry("globex"), entry(task="w-1"), entry(task="w-2")])
    first = entries_page(store, "acme", limit=2)
    assert [(e.tenant, e.task) for e in first.items] == [("acme", "w-0"), ("acme", "w-1")]
    assert (first.next_after, first.remaining) == (first.items[-1].id, 1)
    rest = entries_page(store, "acme", after=first.next_after or 0, limit=2)
    assert ([e.task for e in rest.items], rest.next_after, rest.remaining) == (["w-2"], None, None)
    assert [e.tenant for e in entries_page(store, limit=10).items] == [
        "acme",
        "globex",
        "acme",
        "acme",
    ]
