"""Which replicas a service starts and which it takes out, given the desired count: scaling and
rolling updates in one pure step (Kubernetes' Deployment rules).

A replica of the current revision is *new*, any other *old*. New replicas are started up to
the desired count, with at most ``maxSurge`` replicas above it in all; old replicas are taken
out while at least ``desired - maxUnavailable`` replicas stay ready (old ones that are not
ready serve nothing and go first). Without old replicas it is plain scaling: replicas that are
not ready go before ready ones, the newest first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aipaas.api.service import RollingUpdate, budget_replicas


@dataclass(frozen=True)
class ReplicaView:
    name: str
    revision: str
    ready: bool
    created_at: float


@dataclass(frozen=True)
class Plan:
    create: int
    remove: tuple[str, ...]


def plan(
    replicas: Sequence[ReplicaView], revision: str, desired: int, rolling: RollingUpdate
) -> Plan:
    """``replicas``: those that serve or may soon (draining ones left out)."""
    surge = budget_replicas(rolling.max_surge, desired, round_up=True)
    unavailable = budget_replicas(rolling.max_unavailable, desired, round_up=False)
    if surge == 0 and unavailable == 0:
        surge = 1  # a percentage of few replicas rounds to nothing: progress anyway
    new = sorted((r for r in replicas if r.revision == revision), key=lambda r: r.created_at)
    old = sorted((r for r in replicas if r.revision != revision), key=lambda r: r.created_at)
    if not old:
        if len(new) <= desired:
            return Plan(desired - len(new), ())
        extra = len(new) - desired
        # Not ready first, then the newest: the replicas that warmed up longest stay.
        order = sorted(new, key=lambda r: (r.ready, -r.created_at))
        return Plan(0, tuple(r.name for r in order[:extra]))
    removed = [r.name for r in old if not r.ready]
    old_ready = [r for r in old if r.ready]
    ready_new = sum(r.ready for r in new)
    room = desired + surge - (len(new) + len(old_ready))
    create = max(0, min(desired - len(new), room))
    keep_ready = max(desired - unavailable, 0)
    can_remove = max(0, min(ready_new + len(old_ready) - keep_ready, len(old_ready)))
    removed += [r.name for r in old_ready[:can_remove]]
    if len(new) > desired:
        surplus = sorted(new, key=lambda r: (r.ready, -r.created_at))[: len(new) - desired]
        removed += [r.name for r in surplus if not r.ready]
    return Plan(create, tuple(removed))
