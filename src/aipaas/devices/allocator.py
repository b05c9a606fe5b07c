"""The claim allocator: all claims of one pod on one node together, or reasons why not.

Who calls it: the scheduler's filter and reserve steps, `aipaas allocate --dry-run`, the
benchmarks. Pure: claims, classes, inventory and what is in use go in; picks or reasons come out.
It never writes claim status (the caller persists an allocation, as in Kubernetes).

The search, per node:

1. Each request has alternatives (``exactly``: one; ``firstAvailable``: several, in order).
   An alternative's candidates are the node's devices its class and request selectors select,
   that have the capacity it asks for and tolerate their taints. Candidates are ordered by the
   topology helper (tightest NVLink domain / NUMA node first).
2. Requests are placed in order; a request's devices are chosen as an increasing sequence of
   candidate positions (no permutation is tried twice); a chosen device is held (whole, or a
   share of its capacity when it allows multiple allocations) with its shared counters, so a
   GPU is used whole or as MIG partitions, never both.
3. matchAttribute fixes the value with the first device of the constraint and prunes a branch
   when fewer free candidates with that value remain than the request still needs;
   distinctAttribute refuses a value already taken.
4. On a dead end the search backtracks: the last device, then the next alternative of an
   earlier request. A step budget bounds the worst case; hitting it is reported as a reason.

adminAccess requests select devices without holding them (monitoring of devices in use).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final

from aipaas.api.devices import (
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceClass,
    DeviceRequestAllocationResult,
    ResourceClaim,
)
from aipaas.api.quantity import format_quantity
from aipaas.devices.diagnosis import diagnose
from aipaas.devices.inventory import (
    ALL_NODES,
    BY_SELECTOR,
    DeviceInfo,
    InUse,
    Inventory,
    hold,
    release,
)
from aipaas.devices.requests import (
    Alternative,
    Plan,
    consumed_capacity,
    make_plan,
    static_candidates,
)
from aipaas.devices.topology import node_class, order_candidates, score_placement

__all__ = [
    "MAX_STEPS",
    "NodeAllocation",
    "Pick",
    "PodAllocation",
    "allocate_on_node",
    "allocate_pod",
]

MAX_STEPS: Final = 200_000
PERFECT_SCORE: Final = 100.0


@dataclass(frozen=True, slots=True)
class Pick:
    """One device given to one request of one claim."""

    claim: str
    request: str
    device: DeviceInfo
    consumed: dict[str, Decimal] | None  # a share of a shareable device; None: whole
    admin: bool

    def result(self) -> DeviceRequestAllocationResult:
        """The Kubernetes-shaped allocation result of this pick."""
        driver, pool, name = self.device.id
        consumed = {
            _published(k, driver): format_quantity(v) for k, v in (self.consumed or {}).items()
        }
        share = None
        if self.consumed is not None:
            digest = hashlib.sha256(f"{self.claim}/{self.request}/{name}".encode()).hexdigest()
            share = f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        return DeviceRequestAllocationResult(
            request=self.request,
            driver=driver,
            pool=pool,
            device=name,
            admin_access=True if self.admin else None,
            share_id=share,
            consumed_capacity=consumed,
        )


@dataclass(frozen=True, slots=True)
class NodeAllocation:
    """Every claim of a pod satisfied on one node."""

    node: str
    picks: tuple[Pick, ...]
    score: float

    def by_claim(self) -> dict[str, list[DeviceRequestAllocationResult]]:
        results: dict[str, list[DeviceRequestAllocationResult]] = {}
        for pick in self.picks:
            results.setdefault(pick.claim, []).append(pick.result())
        return results

    def allocation_result(
        self, claim: ResourceClaim, classes: Mapping[str, DeviceClass]
    ) -> AllocationResult:
        """What to write into ``claim.status.allocation`` (the caller persists it).

        Carries the devices, the configuration of the classes used (FromClass) and of the
        claim (FromClaim), and a node selector naming the node (unless every device is
        reachable from all nodes).
        """
        name = claim.metadata.name or claim.metadata.generate_name or ""
        results = [p.result() for p in self.picks if p.claim == name]
        config: list[DeviceAllocationConfiguration] = []
        used_classes: dict[str, list[str]] = {}
        for request in claim.spec.devices.requests:
            bodies = [request.exactly] if request.exactly else list(request.first_available or ())
            for body in bodies:
                if body is not None:
                    used_classes.setdefault(body.device_class_name, []).append(request.name)
        for class_name, requests in used_classes.items():
            device_class = classes.get(class_name)
            for class_config in device_class.spec.config if device_class else ():
                config.append(
                    DeviceAllocationConfiguration(
                        source="FromClass", requests=requests, opaque=class_config.opaque
                    )
                )
        for claim_config in claim.spec.devices.config:
            config.append(
                DeviceAllocationConfiguration(
                    source="FromClaim",
                    requests=list(claim_config.requests),
                    opaque=claim_config.opaque,
                )
            )
        node_selector = None
        if any(p.device.node != ALL_NODES for p in self.picks if p.claim == name):
            node_selector = {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [self.node]}
                        ]
                    }
                ]
            }
        return AllocationResult(
            devices=DeviceAllocationResult(results=results, config=config),
            node_selector=node_selector,
        )


@dataclass(frozen=True, slots=True)
class PodAllocation:
    """The answer for a pod: where it fits and with what, or why it fits nowhere."""

    allocation: NodeAllocation | None
    reasons: tuple[str, ...] = ()
    node_reasons: dict[str, str] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.allocation is not None


def allocate_pod(
    claims: Sequence[ResourceClaim],
    inventory: Inventory,
    classes: Mapping[str, DeviceClass],
    in_use: InUse | None = None,
    *,
    nodes: Sequence[str] | None = None,
    best: bool = False,
) -> PodAllocation:
    """Find a node where all claims of a pod fit together.

    Args:
        claims: the pod's claims, in order (claims that already have an allocation are
            ignored here; pass them to ``Inventory.in_use`` instead).
        inventory: the published devices.
        classes: device classes by name.
        in_use: what existing allocations hold (default: nothing).
        nodes: the nodes to try, in order (default: every node of the inventory).
        best: try every node and keep the one the topology score likes most (ties: node
            order); otherwise stop at the first node that fits.

    Returns:
        The allocation, or the reasons per node class when no node fits.
    """
    state = in_use.copy() if in_use is not None else InUse()
    plan = make_plan([c for c in claims if not _allocated(c)], classes)
    candidates = list(nodes) if nodes is not None else inventory.nodes
    if not candidates and ALL_NODES in inventory.by_node:
        candidates = [ALL_NODES]
    chosen: NodeAllocation | None = None
    minimum = _fewest_devices(plan)
    held = _held_per_node(inventory, state)
    shared = len(inventory.by_node.get(ALL_NODES, ())) + len(inventory.by_node.get(BY_SELECTOR, ()))
    for node in candidates:
        if len(inventory.by_node.get(node, ())) + shared - held.get(node, 0) < minimum:
            continue
        outcome = allocate_on_node(plan, node, inventory, state, explain=False)
        if isinstance(outcome, str):
            continue
        if not best:
            return PodAllocation(outcome)
        if chosen is None or outcome.score > chosen.score:
            chosen = outcome
            if chosen.score >= PERFECT_SCORE:
                break  # nothing can beat it, and ties go to the earlier node
    if chosen is not None:
        return PodAllocation(chosen)
    if not candidates:
        return PodAllocation(None, ("no node publishes any device",), {})
    # Nothing fits: only now say why, node by node (diagnosis is the slow part).
    refusals: dict[str, str] = {}
    for node in candidates:
        outcome = allocate_on_node(plan, node, inventory, state)
        refusals[node] = outcome if isinstance(outcome, str) else "fits (state changed)"
    return PodAllocation(None, _group_reasons(refusals, inventory), refusals)


def allocate_on_node(
    plan: Plan, node: str, inventory: Inventory, state: InUse, *, explain: bool = True
) -> NodeAllocation | str:
    """Place every request of ``plan`` on ``node``; the allocation, or the reason it fails.

    ``state`` is left as it was found (the search holds and releases as it goes). With
    ``explain=False`` a failure is reported as "" (no diagnosis: cheaper).
    """
    devices = inventory.devices_for(node)
    if not devices:
        return "the node publishes no devices"
    search = _Search(plan, node, devices, inventory, state)
    if search.run():
        picks = tuple(search.picks)
        score = score_placement(picks, devices, state)
        while search.picks:
            search.release_last()
        return NodeAllocation(node, picks, score)
    if search.steps > MAX_STEPS:
        return f"gave up after {MAX_STEPS} search steps"
    if not explain:
        return ""
    return diagnose(plan, node, devices, inventory, state)


class _Search:
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
        return self._place(0)

    def _place(self, index: int) -> bool:
        if index == len(self.plan.requests):
            return True
        request = self.plan.requests[index]
        for alternative in request.alternatives:
            candidates = candidates_for(alternative, self.node, self.devices, self.state)
            covering = self.plan.constraints_for(alternative, request.claim_index)
            if alternative.all_mode:
                if candidates and self._take_all(
                    alternative, request.claim_index, covering, candidates, index
                ):
                    return True
                continue
            if len(candidates) < alternative.count:
                continue
            if self._choose(
                alternative, request.claim_index, covering, candidates, 0, alternative.count, index
            ):
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
    ) -> bool:
        if remaining == 0:
            return self._place(index + 1)
        for position in range(start, len(candidates) - remaining + 1):
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
            if remaining > 1 and not self._enough_left(
                alternative, claim_index, covering, candidates, position + 1, remaining - 1
            ):
                self._unconstrain(claim_index, undo)
                continue
            self._hold(device, alternative, consumed)
            if self._choose(
                alternative, claim_index, covering, candidates, position + 1, remaining - 1, index
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
            undo = self._constrain(device, claim_index, covering) if fits else None
            if undo is None:
                break
            undos.append(undo)
            self._hold(device, alternative, consumed)
            held += 1
        else:
            success = self._place(index + 1)
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
            consumed = consumed_capacity(device, alternative)
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

    def _hold(
        self, device: DeviceInfo, alternative: Alternative, consumed: dict[str, Decimal] | None
    ) -> None:
        if not alternative.admin:
            hold(self.state, device, consumed)
        self.picks.append(
            Pick(alternative.claim, alternative.name, device, consumed, alternative.admin)
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
        alternative: Alternative,
        claim_index: int,
        covering: list[int],
        candidates: list[DeviceInfo],
        start: int,
        needed: int,
    ) -> bool:
        """Pruning: do enough later candidates agree with the matched values?"""
        constraints = self.plan.claims[claim_index].constraints
        fixed = [
            (constraints[i].match_attribute or "", self.matched[claim_index][i])
            for i in covering
            if constraints[i].match_attribute is not None
        ]
        if not fixed:
            return len(candidates) - start >= needed
        count = 0
        for device in candidates[start:]:
            if all(device.attribute(attr) == value for attr, value in fixed):
                count += 1
                if count >= needed:
                    return True
        return False


def candidates_for(
    alternative: Alternative, node: str, devices: list[DeviceInfo], state: InUse
) -> list[DeviceInfo]:
    """The node's devices that an alternative may take, best topology first (cached per node)."""
    cached = alternative.candidates.get(node)
    if cached is None:
        cached = static_candidates(alternative, devices)[0]
        alternative.candidates[node] = cached
    if alternative.all_mode or not cached:
        return cached
    return order_candidates(cached, alternative.count, state)


def _fewest_devices(plan: Plan) -> int:
    """A lower bound of the devices the plan holds (adminAccess and shares hold none whole)."""
    total = 0
    for request in plan.requests:
        total += min(
            (0 if a.admin or a.capacity else (1 if a.all_mode else a.count))
            for a in request.alternatives
        )
    return total


def _held_per_node(inventory: Inventory, state: InUse) -> dict[str, int]:
    """How many devices each node has held whole (all-nodes devices are not counted)."""
    held: dict[str, int] = {}
    for device_id in state.devices:
        record = inventory.by_id.get(device_id)
        if record is not None and record.node != ALL_NODES:
            held[record.node] = held.get(record.node, 0) + 1
    return held


def _published(qualified: str, driver: str) -> str:
    """Capacity names of the driver's own domain are published unqualified."""
    domain, _, name = qualified.rpartition("/")
    return name if domain == driver else qualified


def _allocated(claim: ResourceClaim) -> bool:
    return claim.status is not None and claim.status.allocation is not None


def _group_reasons(refusals: dict[str, str], inventory: Inventory) -> tuple[str, ...]:
    groups: dict[tuple[str, str], list[str]] = {}
    for node, reason in refusals.items():
        groups.setdefault((node_class(inventory.devices_for(node)), reason), []).append(node)
    lines = []
    for (klass, reason), nodes in groups.items():
        count = f"{len(nodes)} node" + ("s" if len(nodes) != 1 else "")
        example = nodes[0] if len(nodes) == 1 else f"e.g. {nodes[0]}"
        lines.append(f"{count} of class {klass} ({example}): {reason}")
    return tuple(lines)
