"""The CLI tests' in-process server (cli_world.py)."""

from tests.unit.cli.cli_world import pg_world, postgres, world

__all__ = ["pg_world", "postgres", "world"]
