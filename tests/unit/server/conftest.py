"""Fixtures of the server tests; the helpers live in api_world.py."""

from tests.unit.server.api_world import api

__all__ = ["api"]
