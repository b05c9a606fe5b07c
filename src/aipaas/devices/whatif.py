"""What-if allocation: DeviceClasses, ResourceSlices and one pod's claims in, a JSON answer out.

Who calls it: `aipaas allocate --dry-run` (and any outside check that wants the same answer
without a server). Pure: the caller reads the file.

Claims that already carry ``status.allocation`` are allocations that exist (they hold their
devices); DeviceTaintRules taint the devices they select; the other claims are the pod's,
allocated together on one node. A ResourceClaimTemplate stands for the claim a pod would get
from it (named after the template).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aipaas.api.devices import (
    DeviceClass,
    DeviceObject,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from aipaas.devices.allocator import allocate_pod
from aipaas.devices.inventory import Inventory, InventoryError

__all__ = ["claim_from_template", "what_if"]


def what_if(objects: Sequence[DeviceObject], *, best: bool = True) -> dict[str, Any]:
    """Allocate the pod's claims against the slices; the `aipaas allocate -o json` answer.

    Returns:
        ``{"fits": true, "node": N, "allocations": {claim: [{"request", "driver", "pool",
        "device", "consumedCapacity"}]}, "reasons": []}`` or ``{"fits": false, "reasons": [...]}``.

    Raises:
        InventoryError: slices that contradict each other, or an existing allocation naming a
            device that is not published.
    """
    classes = {o.metadata.name or "": o for o in objects if isinstance(o, DeviceClass)}
    slices = [o for o in objects if isinstance(o, ResourceSlice)]
    claims = [o for o in objects if isinstance(o, ResourceClaim)]
    claims += [claim_from_template(o) for o in objects if isinstance(o, ResourceClaimTemplate)]
    names = [c.metadata.name or c.metadata.generate_name or "" for c in claims]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InventoryError(f'ResourceClaim "{duplicates[0]}" appears more than once')
    rules = [o for o in objects if isinstance(o, DeviceTaintRule)]
    inventory = Inventory(slices, taint_rules=rules)
    inventory.check_counters()
    existing = [c for c in claims if c.status is not None and c.status.allocation is not None]
    pending = [c for c in claims if c not in existing]
    if not pending:
        raise InventoryError("no ResourceClaim without status.allocation: nothing to allocate")
    result = allocate_pod(pending, inventory, classes, inventory.in_use(existing), best=best)
    if result.allocation is None:
        return {"fits": False, "reasons": list(result.reasons)}
    allocations: dict[str, list[dict[str, Any]]] = {}
    for claim_name, rows in result.allocation.by_claim().items():
        allocations[claim_name] = [
            {
                "request": row.request,
                "driver": row.driver,
                "pool": row.pool,
                "device": row.device,
                "consumedCapacity": dict(row.consumed_capacity),
            }
            for row in rows
        ]
    return {
        "fits": True,
        "node": result.allocation.node,
        "allocations": allocations,
        "reasons": [],
    }


def claim_from_template(template: ResourceClaimTemplate) -> ResourceClaim:
    """The claim a pod gets from a template (named after it; labels and annotations copied)."""
    meta = template.spec.metadata
    return ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": template.metadata.name or template.metadata.generate_name,
                "namespace": template.metadata.namespace,
                "labels": dict(meta.labels) if meta else {},
                "annotations": dict(meta.annotations) if meta else {},
            },
            "spec": template.spec.spec.model_dump(by_alias=True, exclude_unset=True),
        }
    )
