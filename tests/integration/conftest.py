"""Integration fixtures: a real server process per test, on SQLite and (when it can be started)
PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aipaas.store.pgtest import ThrowawayPostgres, unavailable_reason
from tests.support.server_process import ServerProcess


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[ThrowawayPostgres]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    server = ThrowawayPostgres()
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None
    server: ThrowawayPostgres = request.getfixturevalue("postgres_server")
    server.reset()
    return server.url


@pytest.fixture
def server(tmp_path: Path, db_url: str | None) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path / "data", db=db_url).start()
    yield process
    process.stop()


@pytest.fixture
def sqlite_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """For behaviour that does not depend on the database (kept off PostgreSQL for time)."""
    process = ServerProcess(tmp_path / "data").start()
    yield process
    process.stop()


# Modules that start a Slurm cluster on this host run one after another on one worker (two
# clusters at once have crossed messages on a loaded machine); every other integration module
# keeps its tests on one worker, so a module's own cluster or server starts once
# (scripts/test.sh runs pytest with ``--dist loadgroup``).
_SLURM_MODULES = (
    "test_slurm_backend.py",
    "test_slurm_third_party.py",
    "test_slurm_accounting.py",
    "test_multi_backend.py",
    "test_data_slurm.py",
    "test_task_images_slurm.py",
    "test_pytorch_slurm.py",
    "test_backend_conformance.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path
        if path.parent.name != "integration":
            continue
        group = "slurm" if path.name in _SLURM_MODULES else path.name
        item.add_marker(pytest.mark.xdist_group(group))
