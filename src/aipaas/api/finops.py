"""PriceList, Budget and invitations (issue 15: tenant admins and FinOps)."""

from __future__ import annotations

from aipaas.api.meta import Object

FINOPS_KINDS: tuple[type[Object], ...] = ()
