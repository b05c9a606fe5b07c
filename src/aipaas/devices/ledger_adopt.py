"""The device ledger's ownership of what runs: ``adopt`` makes a running pod the owner of
what its stored claims hold (so an eviction's what-if sees the devices a victim would leave),
and ``hold_again`` takes back what an owner gave back (a discarded what-if, or a victim that
keeps its devices until its stop is confirmed). A mixin of ``DeviceLedger`` (ledger.py), whose
fields it uses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aipaas.api.devices import AllocationResult, ResourceClaim
from aipaas.devices.inventory import InUse, Inventory, hold
from aipaas.devices.ledger_units import Unit, shared_key
from aipaas.devices.picks import Pick, stored_picks


class Adoption:
    """``adopt`` and ``hold_again`` (the fields are ``DeviceLedger``'s)."""

    inventory: Inventory
    in_use: InUse
    _units: dict[str, Unit]
    _owned: dict[str, list[str]]  # owner -> unit keys
    _given_back: dict[str, list[tuple[str, Unit]]]

    def adopt(
        self,
        owner: str,
        node: str,
        claims: Sequence[ResourceClaim],
        allocations: Mapping[str, AllocationResult],
    ) -> None:
        """Make a running pod (``owner``, on ``node``) the owner of what its stored claims
        hold (``allocations``: status.allocation by claim name; ``from_claims`` holds their
        devices already), so that ``unreserve(owner)`` gives them back. A shared claim (with a
        uid) is one unit whose devices go with its last consumer. Devices that are not held
        (no longer published) are left out."""
        keys = self._owned.setdefault(owner, [])
        for claim in claims:
            name = claim.metadata.name or ""
            allocation = allocations.get(name)
            key = shared_key(claim) or f"{owner}\0{name}"
            if allocation is None or key in keys:
                continue
            unit = self._units.get(key)
            if unit is None:
                picks = stored_picks(self.inventory, name, allocation)
                held = tuple(p for p in picks if p.admin or not self.in_use.is_free(p.device.id))
                unit = self._units[key] = Unit(node, held, [])
            unit.consumers.append(owner)
            keys.append(key)
        if not keys:
            del self._owned[owner]

    def hold_again(self, owner: str) -> list[Pick] | None:
        """Take back what ``owner`` gave back last (its claims' very devices); the picks held
        anew (a shared claim that another consumer kept adds none). None when it gave nothing
        back.

        Raises:
            ValueError: a device it held is held by another owner now (whoever took it must
                give it back first: a statement undoes its starts before its evictions).
        """
        units = self._given_back.pop(owner, None)
        if not units:
            return None
        for key, unit in units:
            if key in self._units:
                continue  # a shared claim another consumer kept: joined, nothing held anew
            for pick in unit.picks:
                if (
                    not pick.admin
                    and pick.consumed is None
                    and not self.in_use.is_free(pick.device.id)
                ):
                    raise ValueError(
                        f"{owner}: device {pick.device.name} of node {unit.node} is held by "
                        f"{', '.join(self.in_use.holders.get(pick.device.id, [])) or 'another'}"
                    )
        taken: list[Pick] = []
        keys = self._owned.setdefault(owner, [])
        for key, unit in units:
            live = self._units.get(key)
            if live is None:
                for pick in unit.picks:
                    if not pick.admin:
                        hold(self.in_use, pick.device, pick.consumed)
                        self.in_use.holders.setdefault(pick.device.id, []).append(owner)
                        taken.append(pick)
                live = self._units[key] = Unit(unit.node, unit.picks, [])
            live.consumers.append(owner)
            keys.append(key)
        return taken
