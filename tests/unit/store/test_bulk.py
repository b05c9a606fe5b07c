"""Many rows in one statement (store/bulk.py), on SQLite and PostgreSQL alike."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, StatementError

from aipaas.store import Store, tables
from aipaas.store.bulk import insert_rows, rows_with_keys, update_rows

WHEN = datetime(2026, 11, 23, 1, 2, 3, tzinfo=UTC)


def task_row(name: str, **changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "job_uid": "u1",
        "tenant": "acme",
        "job_name": "train",
        "name": name,
        "group_name": "w",
        "index": 0,  # a column named like an SQL keyword
        "rank": 0,
        "attempt": 0,
        "phase": "Pending",
        "node": None,
        "node_index": None,
        "gpus": "",
        "gpu_milli": 0,
        "request_id": None,
        "exit_code": None,  # a column with no value in any row
        "restart_after": None,
        "stopping": False,
        "log_path": None,
        "message": "",
        "started_at": None,
        "finished_at": None,
    }
    return row | changes


def stored_tasks(store: Store) -> dict[str, dict[str, Any]]:
    with store.transaction(write=False) as tx:
        rows = tx.execute(select(tables.tasks)).mappings().all()
    return {row["name"]: dict(row) for row in rows}


def test_inserted_rows_read_back_as_given(store: Store) -> None:
    rows = [
        task_row("w-0"),
        task_row(
            "w-1",
            index=1,
            rank=1,
            node="n1",
            node_index=3,
            gpus="0,1",
            gpu_milli=2500,
            stopping=True,
            message="it's \"quoted\", {braced} and, comma'd",
            started_at=WHEN,
        ),
    ]
    with store.transaction() as tx:
        insert_rows(tx, tables.tasks, rows)
    stored = stored_tasks(store)
    for row in rows:
        got = stored[row["name"]]
        if got["started_at"] is not None:  # SQLite gives back a naive time
            got["started_at"] = got["started_at"].replace(tzinfo=UTC)
        assert {key: got[key] for key in row} == row


def test_no_rows_changes_nothing(store: Store) -> None:
    with store.transaction() as tx:
        insert_rows(tx, tables.tasks, [])
        assert update_rows(tx, tables.tasks, [], match=("job_uid", "name")) == 0
    assert stored_tasks(store) == {}


def test_a_duplicate_fails_the_whole_insert(store: Store) -> None:
    with store.transaction() as tx:
        insert_rows(tx, tables.tasks, [task_row("w-0")])
    with pytest.raises(IntegrityError), store.transaction() as tx:
        insert_rows(tx, tables.tasks, [task_row("w-1"), task_row("w-0")])
    assert list(stored_tasks(store)) == ["w-0"]


def test_update_sets_matched_rows_and_counts_them(store: Store) -> None:
    with store.transaction() as tx:
        insert_rows(tx, tables.tasks, [task_row("w-0"), task_row("w-1"), task_row("w-2")])
    changes: list[dict[str, Any]] = [
        {"job_uid": "u1", "name": "w-0", "phase": "Running", "exit_code": None},
        {"job_uid": "u1", "name": "w-2", "phase": "Failed", "exit_code": 3},
        {"job_uid": "u1", "name": "w-9", "phase": "Failed", "exit_code": 1},  # no such row
    ]
    with store.transaction() as tx:
        updated = update_rows(
            tx, tables.tasks, changes, match=("job_uid", "name"), increment=("attempt",)
        )
    assert updated == 2
    stored = stored_tasks(store)
    assert {n: (r["phase"], r["exit_code"], r["attempt"]) for n, r in stored.items()} == {
        "w-0": ("Running", None, 1),
        "w-1": ("Pending", None, 0),
        "w-2": ("Failed", 3, 1),
    }


def test_update_matches_on_every_match_column(store: Store) -> None:
    with store.transaction() as tx:
        insert_rows(tx, tables.tasks, [task_row("w-0", attempt=2)])
        stale = {"job_uid": "u1", "name": "w-0", "attempt": 1, "phase": "Lost"}
        assert (
            update_rows(
                tx, tables.tasks, [stale], match=("job_uid", "name", "attempt"), increment=()
            )
            == 0
        )
    assert stored_tasks(store)["w-0"]["phase"] == "Pending"


def test_a_value_the_database_cannot_hold_is_refused_and_nothing_written(store: Store) -> None:
    with pytest.raises((TypeError, StatementError)), store.transaction() as tx:
        insert_rows(tx, tables.tasks, [task_row("w-0"), task_row("w-1", message={"a"})])
    assert stored_tasks(store) == {}


def test_rows_with_keys_finds_exactly_the_keys_that_exist(store: Store) -> None:
    with store.transaction() as tx:
        insert_rows(tx, tables.tasks, [task_row("w-0"), task_row("w-1"), task_row("w-2")])
    with store.transaction(write=False) as tx:
        found = rows_with_keys(
            tx, tables.tasks, ("job_uid", "name"), [("u1", "w-2"), ("u1", "w-0"), ("u2", "w-1")]
        )
        assert sorted(row["name"] for row in found) == ["w-0", "w-2"]
        assert rows_with_keys(tx, tables.tasks, ("job_uid", "name"), []) == []
