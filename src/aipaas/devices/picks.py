"""A device given to a request: the allocator's unit of output.

Who calls it: the allocator, the search, the topology score, the ledger. Pure.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from decimal import Decimal

from aipaas.api.devices import AllocationResult, DeviceRequestAllocationResult, DeviceToleration
from aipaas.api.quantity import format_quantity, parse_quantity
from aipaas.devices.inventory import DeviceInfo, Inventory, qualify

__all__ = ["Pick", "stored_picks"]


@dataclass(frozen=True, slots=True)
class Pick:
    """One device given to one request of one claim."""

    claim: str
    request: str
    device: DeviceInfo
    consumed: dict[str, Decimal] | None  # a share of a shareable device; None: whole
    admin: bool
    #: the n-th share of this device for this request (a request may take several shares)
    share_index: int = 0
    #: the request's tolerations, copied into the result as Kubernetes does
    tolerations: tuple[DeviceToleration, ...] = ()

    def result(self) -> DeviceRequestAllocationResult:
        """The Kubernetes-shaped allocation result of this pick."""
        driver, pool, name = self.device.id
        consumed = {
            _published(k, driver): format_quantity(v) for k, v in (self.consumed or {}).items()
        }
        share = None
        if self.consumed is not None:
            key = f"{self.claim}/{self.request}/{name}"
            if self.share_index:
                key += f"/{self.share_index}"
            digest = hashlib.sha256(key.encode()).hexdigest()
            share = f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        # Set only when there is something to say, so a result without them is written as
        # before (stored claim status is compared as written).
        extra: dict[str, object] = {}
        if self.tolerations:
            extra["tolerations"] = list(self.tolerations)
        if self.device.binding_conditions:
            extra["binding_conditions"] = list(self.device.binding_conditions)
            extra["binding_failure_conditions"] = list(self.device.binding_failure_conditions)
        return DeviceRequestAllocationResult(
            request=self.request,
            driver=driver,
            pool=pool,
            device=name,
            admin_access=True if self.admin else None,
            share_id=share,
            consumed_capacity=consumed,
            **extra,
        )


def stored_picks(
    inventory: Inventory, claim: str, allocation: AllocationResult
) -> tuple[Pick, ...]:
    """The picks a stored ``status.allocation`` of claim ``claim`` names (the inverse of
    ``Pick.result``, as ``Inventory.in_use`` reads it); devices no longer published are left
    out."""
    picks = []
    for result in allocation.devices.results:
        device = inventory.by_id.get((result.driver, result.pool, result.device))
        if device is None:
            continue
        consumed = None
        if device.multiple:
            consumed = {
                "/".join(qualify(k, device.driver)): parse_quantity(v)
                for k, v in result.consumed_capacity.items()
            }
        picks.append(Pick(claim, result.request, device, consumed, bool(result.admin_access)))
    return tuple(picks)


def _published(qualified: str, driver: str) -> str:
    """Capacity names of the driver's own domain are published unqualified."""
    domain, _, name = qualified.rpartition("/")
    return name if domain == driver else qualified
