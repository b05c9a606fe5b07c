"""Queue: a tenant's line of jobs, with a share weight and its own quota.

A queue's weight is relative to its tenant's other queues: the tenant's share of the cluster is
its Tenant's ``spec.weight`` (set by a platform admin), and a tenant-admin divides it among its
queues. More queues or larger weights therefore gain a tenant nothing against the others.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import ClassVar, Literal

from pydantic import Field

from aipaas.api.meta import LenientModel, Model, Object
from aipaas.api.resources import Quota

MAX_WEIGHT = 1000


class QueueSpec(Model):
    weight: float = Field(default=1, gt=0, le=MAX_WEIGHT)
    quota: Quota = Field(default_factory=Quota)


class Queue(Object):
    plural: ClassVar[str] = "queues"

    kind: Literal["Queue"] = "Queue"
    spec: QueueSpec = Field(default_factory=QueueSpec)
    status: LenientModel | None = None


def effective_weights(
    tenant_weights: Mapping[str, float], queues: Iterable[Queue]
) -> dict[tuple[str, str], float]:
    """Each queue's weight across the cluster, by (tenant, queue): its tenant's weight (1 when
    the tenant is not in ``tenant_weights``) split among the tenant's queues in proportion to
    their own weights. The weights of one tenant's queues add up to the tenant's weight."""
    by_tenant: dict[str, list[Queue]] = defaultdict(list)
    for queue in queues:
        by_tenant[queue.tenant].append(queue)
    result: dict[tuple[str, str], float] = {}
    for tenant, members in by_tenant.items():
        total = sum(q.spec.weight for q in members)
        share = tenant_weights.get(tenant, 1.0)
        for queue in members:
            result[(tenant, queue.name)] = share * queue.spec.weight / total
    return result
