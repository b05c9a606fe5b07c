"""The store fixture: every store test runs on SQLite and, when it can be started, PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aipaas.store import Store
from aipaas.store.pgtest import ThrowawayPostgres, unavailable_reason


@pytest.fixture(scope="session")
def postgres() -> Iterator[ThrowawayPostgres]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    server = ThrowawayPostgres()
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        opened = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    else:
        server: ThrowawayPostgres = request.getfixturevalue("postgres")
        server.reset()
        opened = Store.open(server.url)
    yield opened
    opened.close()
