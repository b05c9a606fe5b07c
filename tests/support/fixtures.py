"""Fixtures any test may ask for by name: tests/conftest.py registers this module as a pytest
plugin (``pytest_plugins``), so no test module imports them. What a fixture needs is imported
when it runs: every test run loads this module, unit tests included."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.support.server_process import ServerProcess


@pytest.fixture(scope="module")
def tenant_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real `aipaas server` on the local backend with tenant acme and its queue research
    (server_process.SETUP) applied, one per test module; the admin's token is the default of
    ``cli()`` and ``http()``. At the end the server stops and the tasks it left running end."""
    from tests.support.server_process import SETUP, ServerProcess

    process = ServerProcess(tmp_path_factory.mktemp("tenant-server") / "data").start()
    try:
        with process.http() as client:
            client.post("/apply", content=SETUP).raise_for_status()
        yield process
    finally:
        process.close()
