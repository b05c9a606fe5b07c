"""Each kind's rules for the API, as a registry of strategies (Kubernetes' REST strategies).

ObjectService (server/service.py) asks ``strategy_for(kind)`` what to do with an object of a
kind; a kind not registered here follows the plain rules of ``KindStrategy``
(server/strategies/base.py). Adding a kind with rules of its own is adding a strategy to
``_STRATEGIES``, not a branch in the service. The routes use ``shown`` for what a reply shows.
"""

from __future__ import annotations

from typing import Any, TypeVar

from aipaas.api.meta import Object
from aipaas.api.registry import KINDS
from aipaas.server.strategies.base import KindStrategy, WrittenBy
from aipaas.server.strategies.data import DatasetStrategy, SecretStrategy
from aipaas.server.strategies.identity import InvitationStrategy, TenantStrategy, UserStrategy
from aipaas.server.strategies.jobs import JobStrategy, QueueStrategy
from aipaas.server.strategies.policy import BudgetStrategy, PriceListStrategy, ServiceStrategy
from aipaas.store.paging import Page

__all__ = ["registered_kinds", "shown", "shown_all", "shown_page", "strategy_for"]

T = TypeVar("T", bound=Object)


class _PlatformPolicy(KindStrategy[Object]):
    """Cluster-wide policy only a platform admin writes, whatever the role table says."""

    written_by = WrittenBy.PLATFORM_ADMIN


class _ReportedByBackends(KindStrategy[Object]):
    """Objects the backends report through the controller; the API only reads them."""

    written_by = WrittenBy.BACKENDS


_PLAIN: KindStrategy[Any] = KindStrategy()
_STRATEGIES: dict[str, KindStrategy[Any]] = {
    "Job": JobStrategy(),
    "Queue": QueueStrategy(),
    "Tenant": TenantStrategy(),
    "User": UserStrategy(),
    "Invitation": InvitationStrategy(),
    "Secret": SecretStrategy(),
    "Dataset": DatasetStrategy(),
    "Service": ServiceStrategy(),
    "Budget": BudgetStrategy(),
    "PriceList": PriceListStrategy(),
    "PriorityClass": _PlatformPolicy(),
    "NodePool": _PlatformPolicy(),
    "Node": _ReportedByBackends(),
    "WebhookDelivery": _ReportedByBackends(),
    "ServiceLoad": _ReportedByBackends(),
}
_unknown = sorted(set(_STRATEGIES) - set(KINDS))
if _unknown:  # a strategy registered under a misspelt kind would never be asked
    raise ValueError(f"strategies for kinds that do not exist: {', '.join(_unknown)}")


def strategy_for(kind: str) -> KindStrategy[Any]:
    """The rules of ``kind`` (the plain ones when it has none of its own)."""
    return _STRATEGIES.get(kind, _PLAIN)


def registered_kinds() -> frozenset[str]:
    """The kinds with rules of their own."""
    return frozenset(_STRATEGIES)


def shown(obj: T) -> T:
    """What the API shows of ``obj`` (a Secret's keys, never its values)."""
    result: T = strategy_for(obj.kind).shown(obj)
    return result


def shown_all(items: list[T]) -> list[T]:
    return [shown(item) for item in items]


def shown_page(page: Page[T]) -> Page[T]:
    return Page(shown_all(page.items), page.next_after, page.remaining)
