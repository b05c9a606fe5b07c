"""A ResourceClaim's device status and its binding conditions (KEP-5007), as Kubernetes 1.37
has them.

Who calls it: the controller's claim book (controller/claims.py) when it writes a claim's
allocation (``device_statuses``), when a backend reports the conditions a device's driver set
(``merge_conditions``), and before it starts a task whose claims hold devices with binding
conditions (``binding_wait``). Pure.

Semantics (kube-scheduler's DRA plugin waits in PreBind the same way):

- ``status.devices`` has one entry per allocated device (admin access ones excepted): driver,
  pool, device, its ``shareID`` when the device is shared by capacity, and ``conditions``.
- A device published with ``bindingConditions`` is allocated like any other, and the
  allocation result carries them (and its ``bindingFailureConditions``); a task that uses it
  waits until every binding condition is ``True`` in that device's status entry. The entry
  starts with each binding condition ``Unknown`` (reason ``WaitingForDriver``) until the
  device's driver says otherwise.
- Any binding failure condition ``True`` fails the binding at once; none of them met after
  ``timeout`` seconds (Kubernetes' default is 600) fails it too. A failed binding gives the
  devices back and the task is placed again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aipaas.api.devices import AllocationResult, DeviceRequestAllocationResult

__all__ = [
    "BINDING_TIMEOUT_SECONDS",
    "BindingWait",
    "DeviceKey",
    "binding_wait",
    "device_statuses",
    "merge_conditions",
]

#: how long a task waits for its devices' binding conditions (kube-scheduler's default)
BINDING_TIMEOUT_SECONDS: Final = 600.0
WAITING_REASON: Final = "WaitingForDriver"

DeviceKey = tuple[str, str, str]
"""(driver, pool, device)."""


@dataclass(frozen=True)
class BindingWait:
    """Why a task does not start yet (``failed`` False) or why its devices' binding failed
    (``failed`` True: give the devices back and place the task again)."""

    failed: bool
    message: str


def device_statuses(allocation: AllocationResult, now: str) -> list[dict[str, Any]]:
    """``status.devices`` of a claim just allocated: one entry per device, each binding
    condition ``Unknown`` until the driver sets it."""
    entries: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str, str | None]] = set()
    for result in allocation.devices.results:
        key = (result.driver, result.pool, result.device, result.share_id)
        if result.admin_access or key in seen:
            continue
        seen.add(key)
        entry: dict[str, Any] = {
            "driver": result.driver,
            "pool": result.pool,
            "device": result.device,
        }
        if result.share_id is not None:
            entry["shareID"] = result.share_id
        entry["conditions"] = [
            {
                "type": kind,
                "status": "Unknown",
                "reason": WAITING_REASON,
                "message": "set by the device's driver",
                "lastTransitionTime": now,
            }
            for kind in result.binding_conditions
        ]
        entries.append(entry)
    return entries


def merge_conditions(
    entries: Sequence[Mapping[str, Any]], observed: Mapping[DeviceKey, Sequence[Mapping[str, Any]]]
) -> list[dict[str, Any]] | None:
    """``entries`` with the conditions a driver set on the devices in ``observed`` (a
    condition of the same type replaced, others kept), or None when nothing changes."""
    merged: list[dict[str, Any]] = []
    changed = False
    for entry in entries:
        key = (str(entry.get("driver")), str(entry.get("pool")), str(entry.get("device")))
        copy = dict(entry)
        seen = observed.get(key)
        if seen:
            kept = {str(c.get("type")): dict(c) for c in entry.get("conditions") or []}
            for condition in seen:
                kept[str(condition.get("type"))] = dict(condition)
            conditions = list(kept.values())
            if conditions != list(entry.get("conditions") or []):
                copy["conditions"] = conditions
                changed = True
        merged.append(copy)
    return merged if changed else None


def binding_wait(
    claim: str,
    allocation: AllocationResult,
    entries: Iterable[Mapping[str, Any]],
    waited_seconds: float,
    timeout: float = BINDING_TIMEOUT_SECONDS,
) -> BindingWait | None:
    """None when every device of ``allocation`` with binding conditions has them all True in
    its ``status.devices`` entry (or none has any); else why the task waits, or why binding
    failed (a failure condition True, or ``timeout`` passed)."""
    statuses = {
        (str(e.get("driver")), str(e.get("pool")), str(e.get("device"))): {
            str(c.get("type")): str(c.get("status")) for c in e.get("conditions") or []
        }
        for e in entries
    }
    waiting: list[str] = []
    for result in allocation.devices.results:
        if result.admin_access or not (
            result.binding_conditions or result.binding_failure_conditions
        ):
            continue
        conditions = statuses.get((result.driver, result.pool, result.device), {})
        failure = _failed(result, conditions)
        if failure:
            return BindingWait(
                True,
                f"claim {claim} device {result.device}: binding failure condition {failure} "
                "is True",
            )
        missing = [c for c in result.binding_conditions if conditions.get(c) != "True"]
        if missing:
            waiting.append(f"device {result.device}: {', '.join(missing)}")
    if not waiting:
        return None
    if waited_seconds >= timeout:
        return BindingWait(
            True,
            f"claim {claim}: binding conditions not met after {timeout:g} s ({'; '.join(waiting)})",
        )
    return BindingWait(False, f"claim {claim} waits for binding conditions ({'; '.join(waiting)})")


def _failed(result: DeviceRequestAllocationResult, conditions: Mapping[str, str]) -> str:
    return next((c for c in result.binding_failure_conditions if conditions.get(c) == "True"), "")
