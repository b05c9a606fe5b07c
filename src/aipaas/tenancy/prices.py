"""Who sees which price list: every tenant the general lists, a tenant its own as well."""

from __future__ import annotations

from aipaas.api.finops import PriceList
from aipaas.tenancy.principal import Principal


def prices_visible(prices: PriceList, caller: Principal) -> bool:
    """A list naming tenants is theirs (negotiated prices): other tenants never see it."""
    if caller.is_platform_admin or not prices.spec.tenants:
        return True
    return bool(caller.tenant) and caller.tenant in prices.spec.tenants
