"""Fixtures of the server tests; the helpers live in api_world.py."""

from api_world import api

__all__ = ["api"]
