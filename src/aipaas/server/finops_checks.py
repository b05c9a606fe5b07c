"""What applying a FinOps object checks against the store (server/service.py calls these in the
transaction that stores it): a queue budget names a queue of its tenant."""

from __future__ import annotations

from collections.abc import Mapping

from aipaas.api.finops import Budget
from aipaas.api.meta import Object
from aipaas.errors import FieldError, InvalidObject
from aipaas.store.store import ObjectKey


def finops_reference_keys(obj: Object) -> list[ObjectKey]:
    if isinstance(obj, Budget) and obj.spec.queue is not None:
        return [("Queue", obj.tenant, obj.spec.queue)]
    return []


def check_finops(obj: Object, found: Mapping[ObjectKey, Object]) -> None:
    for key in finops_reference_keys(obj):
        if key not in found:
            raise InvalidObject(
                [FieldError("spec.queue", f"queue {key[2]} does not exist in tenant {key[1]}")]
            )
