"""Which allocations a device ``NoExecute`` taint ends (Kubernetes' device taint eviction).

Who calls it: the controller's claim book (controller/claims.py) each cycle it reads the
allocated claims, with the inventory whose devices carry their slices' taints and those of
the stored DeviceTaintRules. Pure.

An allocated device with a ``NoExecute`` taint that none of its request's tolerations (the
ones the allocation result carries) tolerates ends the tasks that use the claim: they are
evicted as preemption evicts (back to Pending, their attempt not counted), their claim is
freed once they stopped, and they are placed again where no such taint is. As Kubernetes'
taint managers do, when every toleration that matches has ``tolerationSeconds``, the shortest
of them is how long the tasks may stay after the taint's ``timeAdded`` (a taint without
``timeAdded``: tolerated for good). ``NoSchedule`` and ``None`` taints end nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from aipaas.api.devices import AllocationResult, DeviceTaint, DeviceToleration
from aipaas.devices.inventory import Inventory
from aipaas.devices.requests import tolerated

__all__ = ["no_execute_reason", "parse_time"]


def no_execute_reason(
    inventory: Inventory, claim: str, allocation: AllocationResult, now: datetime | None = None
) -> str | None:
    """Why the tasks using ``claim`` must stop (a device's NoExecute taint not tolerated, or
    tolerated for ``tolerationSeconds`` that have passed by ``now``), or None."""
    for result in allocation.devices.results:
        device = inventory.by_id.get((result.driver, result.pool, result.device))
        if device is None:
            continue
        for taint in device.taints:
            if taint.effect != "NoExecute":
                continue
            value = f"={taint.value}" if taint.value else ""
            what = f"device {result.device} of claim {claim} has the taint {taint.key}{value}"
            if not tolerated(result.tolerations, taint):
                return f"{what}:NoExecute, which its request does not tolerate"
            until = _tolerated_until(result.tolerations, taint)
            if until is not None and now is not None and now >= until:
                return f"{what}:NoExecute, tolerated until {until.isoformat()} only"
    return None


def _tolerated_until(
    tolerations: Sequence[DeviceToleration], taint: DeviceTaint
) -> datetime | None:
    """When the tolerations that match ``taint`` stop tolerating it (None: never)."""
    added = parse_time(taint.time_added)
    matching = [t for t in tolerations if tolerated([t], taint)]
    if added is None or any(t.toleration_seconds is None for t in matching):
        return None
    seconds = min(t.toleration_seconds or 0 for t in matching)
    return added + timedelta(seconds=max(seconds, 0))


def parse_time(text: str | None) -> datetime | None:
    """An RFC 3339 time (``Z`` or an offset; none: UTC), or None when absent or not one."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
