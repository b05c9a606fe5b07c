"""The rules of the kinds that carry policy when the API writes and shows them: a Service's
queue and priority class (server/entry_apply.py), a Budget's queue (server/finops_checks.py),
and a PriceList, which a tenant that is not named in it never sees.

Registered in server/strategies/__init__.py; called by ObjectService (server/service.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from aipaas.api.finops import Budget, PriceList
from aipaas.api.meta import Object
from aipaas.api.service import Service
from aipaas.server.entry_apply import check_service, service_reference_keys
from aipaas.server.finops_checks import budget_keys, check_budget
from aipaas.server.strategies.base import KindStrategy, Writer, WrittenBy, check_tenant_exists
from aipaas.store.store import ObjectKey
from aipaas.tenancy.prices import prices_visible
from aipaas.tenancy.principal import Principal


class ServiceStrategy(KindStrategy[Service]):
    def reference_keys(self, obj: Service) -> list[ObjectKey]:
        return service_reference_keys(obj)

    def check_references(
        self, obj: Service, found: Mapping[ObjectKey, Object], writer: Writer
    ) -> None:
        check_tenant_exists(obj, found)
        check_service(obj, found, platform_admin=writer.caller.is_platform_admin)


class BudgetStrategy(KindStrategy[Budget]):
    def reference_keys(self, obj: Budget) -> list[ObjectKey]:
        return budget_keys(obj)

    def check_references(
        self, obj: Budget, found: Mapping[ObjectKey, Object], writer: Writer
    ) -> None:
        check_tenant_exists(obj, found)
        check_budget(obj, found)


class PriceListStrategy(KindStrategy[PriceList]):
    written_by = WrittenBy.PLATFORM_ADMIN
    hides_some = True

    def visible_to(self, obj: PriceList, caller: Principal) -> bool:
        """A tenant's own (negotiated) price list is invisible to other tenants."""
        return prices_visible(obj, caller)
