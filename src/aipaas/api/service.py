"""Service (issue 14: inference services that scale with load)."""

from __future__ import annotations

from aipaas.api.meta import Object

SERVICE_KINDS: tuple[type[Object], ...] = ()
