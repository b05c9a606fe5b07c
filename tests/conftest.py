"""Fixtures of every test directory: tests/support/fixtures.py (``tenant_server``). And the
line at the end of a run naming the kube-apiserver the Kubernetes tests ran against: written
here, not in tests/kube/conftest.py, because with xdist pytest's main process, which writes
the summary, loads only this conftest."""

from __future__ import annotations

import time

import pytest

from tests.support.kube_seen import seen_file

pytest_plugins = ["tests.support.fixtures"]
STARTED = time.time()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    seen = seen_file()
    if seen.exists() and seen.stat().st_mtime >= STARTED:
        terminalreporter.write_line(f"kubernetes: the tests' API server was {seen.read_text()}")
