"""NodePool (issue 14: node pools that grow and shrink, lent capacity)."""

from __future__ import annotations

from aipaas.api.meta import Object

POOL_KINDS: tuple[type[Object], ...] = ()
