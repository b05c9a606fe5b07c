"""The devices view: every published device, its attributes and who holds it.

Built from the stored ResourceSlices and the allocated ResourceClaims (their status.allocation,
written by the controller). A holder of another tenant shows as ``(another tenant)`` to callers
who do not see that tenant.
"""

from __future__ import annotations

from typing import Any

from aipaas.api.devices import ResourceClaim, ResourceSlice
from aipaas.api.dra import ResourceClaimObject, ResourceSliceObject
from aipaas.devices.inventory import Inventory, InventoryError
from aipaas.devices.listing import device_rows
from aipaas.store import Store
from aipaas.tenancy.principal import Principal

# A claim name that stands for "tenant/name" inside the inventory (a DNS subdomain).
_SEPARATOR = ".."


def device_listing(store: Store, caller: Principal) -> list[dict[str, Any]]:
    slices = [
        s.device()
        for s in store.list_objects("ResourceSlice", "")
        if isinstance(s, ResourceSliceObject)
    ]
    inventory = Inventory([s for s in slices if isinstance(s, ResourceSlice)])
    claims: list[ResourceClaim] = []
    owners: dict[str, str] = {}
    for obj in store.list_objects("ResourceClaim", None):
        if (
            not isinstance(obj, ResourceClaimObject)
            or obj.status is None
            or not obj.status.allocation
        ):
            continue
        claim = obj.claim()
        key = f"{obj.tenant}{_SEPARATOR}{obj.name}"
        owners[key] = (
            f"{obj.tenant}/{obj.name}" if caller.sees_tenant(obj.tenant) else "(another tenant)"
        )
        claims.append(
            claim.model_copy(update={"metadata": claim.metadata.model_copy(update={"name": key})})
        )
    try:
        in_use = inventory.in_use(claims)
    except InventoryError:
        # A claim names a device no longer published: list the devices, holders per claim.
        in_use = inventory.in_use([c for c in claims if _published(inventory, c)])
    rows = []
    for row in device_rows(inventory, in_use):
        wire = row.to_wire()
        wire["holders"] = [owners.get(h, h) for h in row.holders]
        rows.append(wire)
    return rows


def _published(inventory: Inventory, claim: ResourceClaim) -> bool:
    allocation = claim.status.allocation if claim.status else None
    if allocation is None:
        return False
    return all((r.driver, r.pool, r.device) in inventory.by_id for r in allocation.devices.results)
