"""The CLI tests' in-process server (cli_world.py)."""

from cli_world import world

__all__ = ["world"]
