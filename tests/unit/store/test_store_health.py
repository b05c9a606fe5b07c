"""The store's health checks: the integrity check at start (a damaged SQLite file is refused in
one line, a check out of time lets the start go on) and the write probe behind /readyz (the
free-space floor, a committed write, its answer kept between writes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import event, select

from aipaas.store import Store, tables
from aipaas.store.health import (
    PROBE_ROW,
    DamagedDatabase,
    WriteProbe,
    check_sqlite_file,
    sqlite_file,
)


def filled(path: Path, rows: int = 2000) -> Path:
    import sqlite3

    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    connection.execute("CREATE INDEX t_body ON t (body)")
    connection.executemany(
        "INSERT INTO t (body) VALUES (?)", [(f"row {i} " + "x" * 200,) for i in range(rows)]
    )
    connection.commit()
    connection.close()
    return path


def test_a_whole_file_passes_and_a_missing_one_is_not_checked(tmp_path: Path) -> None:
    assert check_sqlite_file(filled(tmp_path / "a.db"), 10) is True
    assert check_sqlite_file(tmp_path / "none.db", 10) is True


def test_a_file_damaged_in_the_middle_is_refused_naming_it(tmp_path: Path) -> None:
    path = filled(tmp_path / "a.db")
    pages = path.stat().st_size // 4096
    with path.open("r+b") as handle:
        handle.seek(pages // 2 * 4096)
        handle.write(b"\xff" * 4096 * 4)
    with pytest.raises(DamagedDatabase) as caught:
        check_sqlite_file(path, 10)
    message = str(caught.value)
    assert message.startswith(f"the database {path} is damaged (")
    assert "restore it from a backup" in message and "\n" not in message


def test_a_file_that_is_no_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    path.write_bytes(b"not a database at all" * 1000)
    with pytest.raises(DamagedDatabase, match="is damaged"):
        check_sqlite_file(path, 10)


def test_a_check_out_of_time_lets_the_start_go_on(tmp_path: Path) -> None:
    assert check_sqlite_file(filled(tmp_path / "a.db", rows=20000), 1e-9) is False


def test_only_a_sqlite_url_names_a_file() -> None:
    assert sqlite_file("sqlite:////data/aipaas.db") == Path("/data/aipaas.db")
    assert sqlite_file("sqlite:///:memory:") is None
    assert sqlite_file("postgresql://db/aipaas") is None


def probe_stamp(store: Store) -> float:
    with store.transaction(write=False) as tx:
        row = tx.execute(select(tables.leases).where(tables.leases.c.name == PROBE_ROW)).first()
    assert row is not None
    return float(row.expires_at)


def test_the_write_probe_writes_and_keeps_its_answer_between_writes(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    try:
        kept = WriteProbe(store, min_free_bytes=0, interval=60)
        assert kept.check().ok
        written = probe_stamp(store)
        assert kept.check().ok and probe_stamp(store) == written  # the answer kept
        eager = WriteProbe(store, min_free_bytes=0, interval=0)
        assert eager.check().ok and probe_stamp(store) > written  # the row rewritten
    finally:
        store.close()


def test_the_write_probe_says_not_ready_under_the_free_space_floor(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    try:
        result = WriteProbe(store, min_free_bytes=1 << 62).check()
        assert not result.ok
        assert "under the floor of 4611686018427387904 (store_min_free_bytes)" in result.why
    finally:
        store.close()


def test_the_write_probe_says_not_ready_when_the_database_refuses_a_write(
    tmp_path: Path,
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    try:
        probe = WriteProbe(store, min_free_bytes=0, interval=0)
        store.engine.dispose()  # every connection from now on is read-only

        @event.listens_for(store.engine, "connect")
        def _read_only(dbapi_connection: object, _record: object) -> None:
            dbapi_connection.execute("PRAGMA query_only=ON")  # type: ignore[attr-defined]

        result = probe.check()
        assert not result.ok and result.why.startswith("the database refused a write:")
    finally:
        store.close()
