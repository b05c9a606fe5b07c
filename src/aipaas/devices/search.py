"""The backtracking search of the allocator on one node (see aipaas.devices.allocator).

Who calls it: ``allocate_on_node``. Pure. The search holds devices in the given ``InUse`` as it
goes and releases them when it backtracks; on success the caller releases them after reading
the picks (``release_last`` until empty).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Final

from aipaas.devices.inventory import DeviceInfo, InUse, Inventory, hold, release
from aipaas.devices.picks import Pick
from aipaas.devices.requests import Alternative, Plan, consumed_capacity, static_candidates
from aipaas.devices.topology import order_candidates

__all__ = ["MAX_STEPS", "Search", "candidates_for"]

MAX_STEPS: Final = 200_000


class Search:
    """Backtracking over requests, alternatives and devices (see the module docstring)."""

    def __init__(
        self,
        plan: Plan,
        node: str,
        devices: list[DeviceInfo],
        inventory: Inventory,
        state: InUse,
    ) -> None:
        self.plan = plan
        self.node = node
        self.devices = devices
        self.inventory = inventory
        self.state = state
        self.picks: list[Pick] = []
        self.steps = 0
        # Per claim, per constraint: the matched value (None: not fixed) or the taken values.
        self.matched: list[list[object]] = [[None] * len(c.constraints) for c in plan.claims]
        self.taken: list[list[set[object]]] = [[set() for _ in c.constraints] for c in plan.claims]

    def run(self) -> bool:
        if not self._constraints_possible():
            return False
        return self._place(0)

    def _constraints_possible(self) -> bool:
        """Quick refusal before searching: for each claim constraint, is there a value with
        enough devices (matchAttribute), or enough distinct values (distinctAttribute), among
        the candidates of the requests it covers? (Necessary, not sufficient.)

        A request with a subrequest the constraint does not name may take that one instead,
        so it needs nothing of the constraint; a shareable device may serve several picks of
        a matchAttribute, so it counts as many as are needed.
        """
        for claim_index, claim in enumerate(self.plan.claims):
            for constraint in claim.constraints:
                needed = 0
                pool: dict[tuple[str, str, str], DeviceInfo] = {}
                for request in self.plan.requests:
                    if request.claim_index != claim_index:
                        continue
                    covered = [a for a in request.alternatives if _covers(constraint.requests, a)]
                    if not covered:
                        continue
                    if len(covered) == len(request.alternatives):
                        needed += min(1 if a.all_mode else a.count for a in covered)
                    for alternative in covered:
                        for device in candidates_for(
                            alternative, self.node, self.devices, self.state, self.inventory
                        ):
                            if device.id not in self.state.devices or alternative.admin:
                                pool[device.id] = device
                attribute = constraint.match_attribute or constraint.distinct_attribute or ""
                counts: dict[object, int] = {}
                for device in pool.values():
                    value = device.attribute(attribute)
                    if value is not None:
                        counts[value] = counts.get(value, 0) + (needed if device.multiple else 1)
                if constraint.match_attribute is not None:
                    if max(counts.values(), default=0) < needed:
                        return False
                elif len(counts) < needed:
                    return False
        return True

    def _place(self, index: int) -> bool:
        if index == len(self.plan.requests):
            return True
        request = self.plan.requests[index]
        for alternative in request.alternatives:
            candidates = candidates_for(
                alternative, self.node, self.devices, self.state, self.inventory
            )
            covering = self.plan.constraints_for(alternative, request.claim_index)
            if alternative.all_mode:
                if candidates and self._take_all(
                    alternative, request.claim_index, covering, candidates, index
                ):
                    return True
                continue
            shareable = _any_shareable(candidates)
            if len(candidates) < alternative.count and not shareable:
                continue
            chosen = self._choose(
                alternative,
                request.claim_index,
                covering,
                candidates,
                0,
                alternative.count,
                index,
                shareable=shareable,
            )
            if chosen:
                return True
            if self.steps > MAX_STEPS:
                return False
        return False

    def _choose(
        self,
        alternative: Alternative,
        claim_index: int,
        covering: list[int],
        candidates: list[DeviceInfo],
        start: int,
        remaining: int,
        index: int,
        *,
        shareable: bool,
    ) -> bool:
        """Pick ``remaining`` devices from ``candidates[start:]`` in increasing positions; a
        shareable device may be picked again for the next device of the same request (each
        pick is one share), as Kubernetes allows (``shareable``: some candidate is)."""
        if remaining == 0:
            return self._place(index + 1)
        stop = len(candidates) if shareable else len(candidates) - remaining + 1
        for position in range(start, stop):
            self.steps += 1
            if self.steps > MAX_STEPS:
                return False
            device = candidates[position]
            fits, consumed = self._fits(device, alternative)
            if not fits:
                continue
            undo = self._constrain(device, claim_index, covering)
            if undo is None:
                continue
            following = position if device.multiple and not alternative.admin else position + 1
            if remaining > 1 and not self._enough_left(
                claim_index, covering, candidates, following, remaining - 1, shareable=shareable
            ):
                self._unconstrain(claim_index, undo)
                continue
            self._hold(device, alternative, consumed)
            if self._choose(
                alternative,
                claim_index,
                covering,
                candidates,
                following,
                remaining - 1,
                index,
                shareable=shareable,
            ):
                return True
            self.release_last()
            self._unconstrain(claim_index, undo)
        return False

    def _take_all(
        self,
        alternative: Alternative,
        claim_index: int,
        covering: list[int],
        candidates: list[DeviceInfo],
        index: int,
    ) -> bool:
        undos: list[list[tuple[int, object, object]]] = []
        held = 0
        success = False
        for device in candidates:
            fits, consumed = self._fits(device, alternative)
            if not fits and device.multiple and device.id not in self.state.devices:
                continue  # a shareable device without room left is not part of "all"
            undo = self._constrain(device, claim_index, covering) if fits else None
            if undo is None:
                break
            undos.append(undo)
            self._hold(device, alternative, consumed)
            held += 1
        else:
            success = held > 0 and self._place(index + 1)
        if success:
            return True
        for _ in range(held):
            self.release_last()
        for undo in reversed(undos):
            self._unconstrain(claim_index, undo)
        return False

    def _fits(
        self, device: DeviceInfo, alternative: Alternative
    ) -> tuple[bool, dict[str, Decimal] | None]:
        """Whether the device can take this alternative now, and what a share would consume."""
        if alternative.admin:
            return True, None
        if device.id in self.state.devices:
            return False, None
        consumed: dict[str, Decimal] | None = None
        if device.multiple:
            consumed = self._consumed(device, alternative)
            if consumed is None:
                return False, None
            used = self.state.capacity.get(device.id, {})
            for name, amount in consumed.items():
                if used.get(name, Decimal(0)) + amount > device.capacity[name]:
                    return False, None
            if self.state.shares.get(device.id):
                return True, consumed  # its counters were consumed with its first share
        elif self.state.shares.get(device.id):
            return False, None
        for key, counters in device.consumes:
            total = self.inventory.counter_sets.get(key)
            if total is None:
                return False, None
            used_counters = self.state.counters.get(key, {})
            for name, amount in counters.items():
                if used_counters.get(name, Decimal(0)) + amount > total.get(name, Decimal(-1)):
                    return False, None
        return True, consumed

    def _consumed(self, device: DeviceInfo, alternative: Alternative) -> dict[str, Decimal] | None:
        """``consumed_capacity``, which depends on the device and the alternative's selection
        alone: kept in the inventory for every pod of the same shape (never mutated)."""
        if not alternative.static_key:
            return consumed_capacity(device, alternative)
        key = (alternative.static_key, device.id)
        cache = self.inventory.consumed
        if key in cache:
            return cache[key]
        found = cache[key] = consumed_capacity(device, alternative)
        return found

    def _hold(
        self, device: DeviceInfo, alternative: Alternative, consumed: dict[str, Decimal] | None
    ) -> None:
        if not alternative.admin:
            hold(self.state, device, consumed)
        again = 0
        if consumed is not None:
            again = sum(
                1
                for p in self.picks
                if p.device is device
                and p.claim == alternative.claim
                and p.request == alternative.name
            )
        self.picks.append(
            Pick(
                alternative.claim,
                alternative.name,
                device,
                consumed,
                alternative.admin,
                again,
                alternative.tolerations,
            )
        )

    def release_last(self) -> None:
        pick = self.picks.pop()
        if not pick.admin:
            release(self.state, pick.device, pick.consumed)

    def _constrain(
        self, device: DeviceInfo, claim_index: int, covering: list[int]
    ) -> list[tuple[int, object, object]] | None:
        """Apply the claim's constraints to a device; an undo list, or None if it breaks one."""
        undo: list[tuple[int, object, object]] = []
        constraints = self.plan.claims[claim_index].constraints
        matched = self.matched[claim_index]
        taken = self.taken[claim_index]
        for index in covering:
            constraint = constraints[index]
            if constraint.match_attribute is not None:
                value = device.attribute(constraint.match_attribute)
                if value is None or (matched[index] is not None and matched[index] != value):
                    self._unconstrain(claim_index, undo)
                    return None
                if matched[index] is None:
                    matched[index] = value
                    undo.append((index, "match", None))
            else:
                value = device.attribute(constraint.distinct_attribute or "")
                if value is None or value in taken[index]:
                    self._unconstrain(claim_index, undo)
                    return None
                taken[index].add(value)
                undo.append((index, "distinct", value))
        return undo

    def _unconstrain(self, claim_index: int, undo: list[tuple[int, object, object]]) -> None:
        for index, kind, value in reversed(undo):
            if kind == "match":
                self.matched[claim_index][index] = None
            else:
                self.taken[claim_index][index].discard(value)

    def _enough_left(
        self,
        claim_index: int,
        covering: list[int],
        candidates: list[DeviceInfo],
        start: int,
        needed: int,
        *,
        shareable: bool,
    ) -> bool:
        """Pruning: do enough later candidates agree with the matched values, and carry
        enough values not yet taken for the distinct constraints?"""
        constraints = self.plan.claims[claim_index].constraints
        fixed = [
            (constraints[i].match_attribute or "", self.matched[claim_index][i])
            for i in covering
            if constraints[i].match_attribute is not None
        ]
        distinct = [
            (constraints[i].distinct_attribute or "", self.taken[claim_index][i])
            for i in covering
            if constraints[i].distinct_attribute is not None
        ]
        if not fixed and not distinct:
            return len(candidates) - start >= needed or (
                shareable and _any_shareable(candidates[start:])
            )
        count = 0
        fresh: list[set[object]] = [set() for _ in distinct]
        for device in candidates[start:]:
            if not all(device.attribute(attr) == value for attr, value in fixed):
                continue
            count += needed if device.multiple else 1
            for seen, (attr, taken) in zip(fresh, distinct, strict=True):
                value = device.attribute(attr)
                if value is not None and value not in taken:
                    seen.add(value)
        return count >= needed and all(len(seen) >= needed for seen in fresh)


def _covers(names: list[str], alternative: Alternative) -> bool:
    """A constraint covers the requests it names (a request, or one subrequest of it), or all."""
    return not names or alternative.request in names or alternative.name in names


def _any_shareable(candidates: list[DeviceInfo]) -> bool:
    return any(d.multiple for d in candidates)


def candidates_for(
    alternative: Alternative,
    node: str,
    devices: list[DeviceInfo],
    state: InUse,
    inventory: Inventory | None = None,
) -> list[DeviceInfo]:
    """The node's devices that an alternative may take, best topology first (cached per node,
    and in ``inventory`` across the pods whose alternatives select alike)."""
    cached = alternative.candidates.get(node)
    if cached is None:
        key = (alternative.static_key, node)
        shared = inventory.candidates if inventory is not None and alternative.static_key else None
        cached = shared.get(key) if shared is not None else None
        if cached is None:
            cached = static_candidates(alternative, devices)[0]
            if shared is not None:
                shared[key] = cached
        alternative.candidates[node] = cached
    if alternative.all_mode or not cached:
        return cached
    return order_candidates(cached, alternative.count, state)
