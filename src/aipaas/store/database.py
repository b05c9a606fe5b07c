"""Engines and migrations: SQLite under a data directory by default, PostgreSQL by URL.

SQLite runs in WAL mode with a busy timeout; write transactions take the lock up front
(BEGIN IMMEDIATE) so concurrent writers wait instead of failing on lock upgrade.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import NullPool

MIGRATIONS = Path(__file__).parent / "migrations"


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{data_dir / 'aipaas.db'}"


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
    return create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)


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
