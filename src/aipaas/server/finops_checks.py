"""What applying a FinOps object checks against the store (its strategy in server/strategies/
calls these in the transaction that stores it): a queue budget names a queue of its tenant."""

from __future__ import annotations

from collections.abc import Mapping

from aipaas.api.finops import Budget
from aipaas.api.meta import Object
from aipaas.errors import FieldError, InvalidObject
from aipaas.store.store import ObjectKey


def budget_keys(budget: Budget) -> list[ObjectKey]:
    if budget.spec.queue is not None:
        return [("Queue", budget.tenant, budget.spec.queue)]
    return []


def check_budget(budget: Budget, found: Mapping[ObjectKey, Object]) -> None:
    for key in budget_keys(budget):
        if key not in found:
            raise InvalidObject(
                [FieldError("spec.queue", f"queue {key[2]} does not exist in tenant {key[1]}")]
            )
