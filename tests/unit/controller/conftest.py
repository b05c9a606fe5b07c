"""Fixtures of the controller tests; the helpers live in tests/support/ctl_world.py."""

from tests.support.ctl_world import cluster_kind, world

__all__ = ["cluster_kind", "world"]
