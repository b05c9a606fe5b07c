"""Dataset and Secret (issue 13: data near compute)."""

from __future__ import annotations

from aipaas.api.meta import Object

DATA_KINDS: tuple[type[Object], ...] = ()
