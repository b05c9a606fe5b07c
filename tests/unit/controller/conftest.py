"""Fixtures of the controller tests; the helpers live in ctl_world.py."""

from ctl_world import cluster_kind, world

__all__ = ["cluster_kind", "world"]
