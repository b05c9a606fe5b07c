"""Fixtures of the controller tests; the helpers live in ctl_world.py."""

from ctl_world import world

__all__ = ["world"]
