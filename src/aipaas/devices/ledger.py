"""The device ledger: what the scheduler's filter, score, reserve and unreserve steps call.

Who calls it: a scheduler plugin (DeviceFit / Topology) and the controller when it rebuilds the
ledger from stored claims. Pure: the caller persists what ``reserve`` returns.

One ledger per scheduling snapshot: the inventory (slices), the classes, and who holds what.
``reserve`` holds a pod's devices under an owner key (the pod / task replica);
``unreserve(owner)`` gives them back and is idempotent (kube-scheduler's Reserve/Unreserve).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from aipaas.api.devices import AllocationResult, DeviceClass, ResourceClaim
from aipaas.devices.allocator import NodeAllocation, allocate_on_node, allocate_pod
from aipaas.devices.inventory import InUse, Inventory, hold, release
from aipaas.devices.requests import make_plan

__all__ = ["DeviceLedger"]


@dataclass
class DeviceLedger:
    """Inventory, classes and holdings of one snapshot."""

    inventory: Inventory
    classes: Mapping[str, DeviceClass]
    in_use: InUse = field(default_factory=InUse)
    reserved: dict[str, NodeAllocation] = field(default_factory=dict)

    @classmethod
    def from_claims(
        cls,
        inventory: Inventory,
        classes: Mapping[str, DeviceClass],
        allocated: Iterable[ResourceClaim],
    ) -> DeviceLedger:
        """A ledger holding what already-allocated claims hold."""
        return cls(inventory, classes, inventory.in_use(allocated))

    def feasible(self, claims: Sequence[ResourceClaim], nodes: Sequence[str]) -> list[bool]:
        """Filter: for each node (in order), can all the pod's claims be allocated there?"""
        plan = make_plan(claims, self.classes)
        return [
            not isinstance(
                allocate_on_node(plan, node, self.inventory, self.in_use, explain=False), str
            )
            for node in nodes
        ]

    def explain(self, claims: Sequence[ResourceClaim], nodes: Sequence[str]) -> dict[str, int]:
        """Why nodes cannot take the pod: reason -> number of nodes (fitting nodes left out)."""
        plan = make_plan(claims, self.classes)
        reasons: dict[str, int] = {}
        for node in nodes:
            outcome = allocate_on_node(plan, node, self.inventory, self.in_use)
            if isinstance(outcome, str):
                reasons[outcome] = reasons.get(outcome, 0) + 1
        return reasons

    def score(self, claims: Sequence[ResourceClaim], nodes: Sequence[str]) -> list[int]:
        """Topology score 0..100 of the placement each node would get (0 where it does not fit)."""
        plan = make_plan(claims, self.classes)
        scores = []
        for node in nodes:
            outcome = allocate_on_node(plan, node, self.inventory, self.in_use, explain=False)
            scores.append(0 if isinstance(outcome, str) else int(outcome.score))
        return scores

    def reserve(
        self, owner: str, claims: Sequence[ResourceClaim], node: str
    ) -> NodeAllocation | str:
        """Allocate the pod's claims on ``node`` and hold them under ``owner``; or the reason.

        Reserving again for the same owner first gives back what it held.
        """
        self.unreserve(owner)
        result = allocate_pod(claims, self.inventory, self.classes, self.in_use, nodes=[node])
        if result.allocation is None:
            return result.node_reasons.get(node, "; ".join(result.reasons))
        for pick in result.allocation.picks:
            if not pick.admin:
                hold(self.in_use, pick.device, pick.consumed)
                self.in_use.holders.setdefault(pick.device.id, []).append(owner)
        self.reserved[owner] = result.allocation
        return result.allocation

    def unreserve(self, owner: str) -> None:
        """Give back what ``owner`` holds; nothing happens when it holds nothing."""
        allocation = self.reserved.pop(owner, None)
        if allocation is None:
            return
        for pick in reversed(allocation.picks):
            if pick.admin:
                continue
            release(self.in_use, pick.device, pick.consumed)
            holders = self.in_use.holders.get(pick.device.id, [])
            if owner in holders:
                holders.remove(owner)

    def results(self, owner: str, claims: Sequence[ResourceClaim]) -> dict[str, AllocationResult]:
        """``status.allocation`` per claim name for what ``owner`` holds (to persist)."""
        allocation = self.reserved.get(owner)
        if allocation is None:
            return {}
        return {
            c.metadata.name or "": allocation.allocation_result(c, self.classes) for c in claims
        }
