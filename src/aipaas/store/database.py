"""Engines and migrations: SQLite under a data directory by default, PostgreSQL by URL.

SQLite runs in WAL mode with a busy timeout; write transactions take the lock up front
(BEGIN IMMEDIATE) so concurrent writers wait instead of failing on lock upgrade.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.pool import NullPool

MIGRATIONS = Path(__file__).parent / "migrations"
IDLE_BEFORE_PING_SECONDS = 5.0


def make_engine(url: str) -> Engine:
    """An engine for ``url``; ``postgresql://`` URLs use psycopg 3."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("sqlite"):
        engine = (
            create_engine(
                url,
                connect_args={"check_same_thread": False, "timeout": 30},
                pool_size=8,
                max_overflow=16,
            )
            if ":memory:" not in url
            else create_engine(url, poolclass=NullPool)
        )
        _tune_sqlite(engine)
        return engine
    engine = create_engine(url, pool_size=10, max_overflow=20)
    _ping_when_idle(engine)
    return engine


def _ping_when_idle(engine: Engine) -> None:
    """Test a pooled PostgreSQL connection before use, but only one that sat idle a while.

    ``pool_pre_ping`` would ping on every checkout: a round trip per transaction, a sixth of
    the group-commit writer's time under load. A connection in steady use is known alive; one
    that has waited (a database restart may have closed it) is pinged, and replaced if dead.
    """

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("idle_since")
        if idle_since is None or time.monotonic() - idle_since < IDLE_BEFORE_PING_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as err:  # any failure: the pool replaces this connection
            raise DisconnectionError(f"pooled connection failed its ping: {err}") from err


def _tune_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        immediate = conn.get_execution_options().get("immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (idempotent)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.connect().execution_options(immediate=True) as connection, connection.begin():
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
