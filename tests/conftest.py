"""Fixtures of every test directory: tests/support/fixtures.py (``tenant_server``)."""

pytest_plugins = ["tests.support.fixtures"]
