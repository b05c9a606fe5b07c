"""Migration 0004 on a database with data: leases get token 0, a pending restart stored as a
monotonic reading becomes a UTC time (now: it may restart at once), nothing is stopping."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, text

from aipaas.store.database import MIGRATIONS, make_engine
from aipaas.store.pgtest import ThrowawayPostgres


def upgrade(engine: Engine, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.connect().execution_options(immediate=True) as connection, connection.begin():
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    if request.param == "sqlite":
        return make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    server: ThrowawayPostgres = request.getfixturevalue("postgres")
    server.reset()
    return make_engine(server.url)


def test_upgrade_keeps_leases_and_pending_restarts(engine: Engine) -> None:
    upgrade(engine, "0003")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO leases VALUES ('controller', 'h:1:x', 12.5)"))
        for name, restart_at in (("w-0", 123.4), ("w-1", None)):
            conn.execute(
                text(
                    "INSERT INTO tasks (job_uid, tenant, job_name, name, group_name, "
                    '"index", rank, attempt, phase, restart_at) VALUES '
                    "('u', 'acme', 'j', :name, 'w', 0, 0, 1, 'Pending', :restart_at)"
                ),
                {"name": name, "restart_at": restart_at},
            )
    upgrade(engine, "head")
    with engine.begin() as conn:
        lease = conn.execute(text("SELECT holder, token FROM leases")).one()
        tasks = conn.execute(
            text("SELECT name, restart_after, stopping FROM tasks ORDER BY name")
        ).all()
        columns = [
            row[0]
            for row in conn.execute(
                text(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = 'tasks'"
                )
                if engine.dialect.name == "postgresql"
                else text("SELECT name FROM pragma_table_info('tasks')")
            )
        ]
    engine.dispose()
    assert tuple(lease) == ("h:1:x", 0)
    assert [(name, after is not None, bool(stopping)) for name, after, stopping in tasks] == [
        ("w-0", True, False),
        ("w-1", False, False),
    ]
    assert "restart_at" not in columns and "restart_after" in columns
