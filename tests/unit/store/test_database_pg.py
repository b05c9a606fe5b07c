"""PostgreSQL connections: a pooled connection that died while idle is replaced, not used."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from aipaas.store import Store, database
from aipaas.store.pgtest import ThrowawayPostgres


def test_a_connection_killed_while_idle_is_replaced(
    postgres: ThrowawayPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    postgres.reset()
    store = Store.open(postgres.url)
    try:
        with store.transaction(write=False) as tx:
            pid_before = tx.execute(text("SELECT pg_backend_pid()")).scalar_one()
        killer = create_engine(postgres.url, poolclass=NullPool)  # from outside the pool
        with killer.begin() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid_before})
        killer.dispose()
        monkeypatch.setattr(database, "IDLE_BEFORE_PING_SECONDS", 0.0)
        for _ in range(3):  # whichever pooled connection comes out, none fails
            with store.transaction(write=False) as tx:
                assert tx.execute(text("SELECT 1")).scalar_one() == 1
    finally:
        store.close()
