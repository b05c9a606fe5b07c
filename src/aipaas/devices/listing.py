"""Rows for `aipaas get devices`: every device, its attributes and capacity, and who holds it.

Who calls it: the server (GET devices) and the CLI table. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from aipaas.api.quantity import format_quantity
from aipaas.devices.inventory import InUse, Inventory

__all__ = ["DeviceRow", "device_rows"]


@dataclass(frozen=True, slots=True)
class DeviceRow:
    node: str
    driver: str
    pool: str
    device: str
    attributes: dict[str, Any]  # "domain/name" -> value
    capacity: dict[str, str]  # "domain/name" -> quantity text
    used: dict[str, str]  # shares taken of a shareable device's capacity
    holders: tuple[str, ...]  # claims (or reservation owners) that hold it
    state: str  # Free, Allocated, Shared or Blocked (its shared counters are taken)

    def to_wire(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
            "attributes": self.attributes,
            "capacity": self.capacity,
            "used": self.used,
            "holders": list(self.holders),
            "state": self.state,
        }


def device_rows(inventory: Inventory, in_use: InUse) -> list[DeviceRow]:
    """One row per published device, by node then device name."""
    rows = []
    for record in sorted(inventory.by_id.values(), key=lambda d: (d.node, d.id)):
        used = {k: format_quantity(v) for k, v in in_use.capacity.get(record.id, {}).items() if v}
        if record.id in in_use.devices:
            state = "Allocated"
        elif in_use.shares.get(record.id):
            state = "Shared"
        elif _blocked(inventory, in_use, record.consumes):
            state = "Blocked"
        else:
            state = "Free"
        rows.append(
            DeviceRow(
                node=record.node,
                driver=record.driver,
                pool=record.pool,
                device=record.name,
                attributes=dict(sorted(record.qualified.items())),
                capacity={k: format_quantity(v) for k, v in sorted(record.capacity.items())},
                used=used,
                holders=tuple(in_use.holders.get(record.id, ())),
                state=state,
            )
        )
    return rows


def _blocked(
    inventory: Inventory,
    in_use: InUse,
    consumes: tuple[tuple[tuple[str, str, str], dict[str, Decimal]], ...],
) -> bool:
    for key, wanted in consumes:
        total = inventory.counter_sets.get(key, {})
        taken = in_use.counters.get(key, {})
        for name, amount in wanted.items():
            if taken.get(name, Decimal(0)) + amount > total.get(name, Decimal(-1)):
                return True
    return False
