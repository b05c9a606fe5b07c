"""Which allocations a device ``NoExecute`` taint ends (Kubernetes' device taint eviction).

Who calls it: the controller's claim book (controller/claims.py) each cycle it reads the
allocated claims, with the inventory whose devices carry their slices' taints and those of
the stored DeviceTaintRules. Pure.

An allocated device with a ``NoExecute`` taint that none of its request's tolerations (the
ones the allocation result carries) tolerates ends the tasks that use the claim: they are
evicted as preemption evicts (back to Pending, their attempt not counted), their claim is
freed once they stopped, and they are placed again where no such taint is. A toleration with
``tolerationSeconds`` counts as tolerating for good here (Kubernetes evicts once the seconds
have passed). ``NoSchedule`` and ``None`` taints end nothing.
"""

from __future__ import annotations

from aipaas.api.devices import AllocationResult
from aipaas.devices.inventory import Inventory
from aipaas.devices.requests import tolerated

__all__ = ["no_execute_reason"]


def no_execute_reason(inventory: Inventory, claim: str, allocation: AllocationResult) -> str | None:
    """Why the tasks using ``claim`` must stop (a device's untolerated NoExecute taint), or
    None when none of its devices has one."""
    for result in allocation.devices.results:
        device = inventory.by_id.get((result.driver, result.pool, result.device))
        if device is None:
            continue
        for taint in device.taints:
            if taint.effect == "NoExecute" and not tolerated(result.tolerations, taint):
                value = f"={taint.value}" if taint.value else ""
                return (
                    f"device {result.device} of claim {claim} has the taint "
                    f"{taint.key}{value}:NoExecute, which its request does not tolerate"
                )
    return None
