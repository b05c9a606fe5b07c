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
   GPU is used whole or as MIG partitions, never both. A shareable device may be chosen again
   for the next device of the same request (another share), as Kubernetes allows.
3. matchAttribute fixes the value with the first device of the constraint and prunes a branch
   when fewer free candidates with that value remain than the request still needs (a shareable
   device counts for any number of shares); distinctAttribute refuses a value already taken.
   A constraint naming one subrequest of a firstAvailable request binds only that subrequest.
   allocationMode All takes every candidate, except shareable devices without room left.
4. On a dead end the search backtracks: the last device, then the next alternative of an
   earlier request. A step budget bounds the worst case; hitting it is reported as a reason.

adminAccess requests select devices without holding them (monitoring of devices in use).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from aipaas.api.devices import (
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceClass,
    DeviceRequestAllocationResult,
    OpaqueDeviceConfiguration,
    ResourceClaim,
)
from aipaas.devices.diagnosis import diagnose
from aipaas.devices.inventory import (
    ALL_NODES,
    BY_SELECTOR,
    InUse,
    Inventory,
)
from aipaas.devices.picks import Pick
from aipaas.devices.requests import (
    Plan,
    make_plan,
)
from aipaas.devices.search import MAX_STEPS, Search
from aipaas.devices.topology import node_class, score_placement

__all__ = [
    "MAX_STEPS",
    "NodeAllocation",
    "Pick",
    "PodAllocation",
    "allocate_on_node",
    "allocate_pod",
    "allocation_config",
]

PERFECT_SCORE: Final = 100.0


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
        config = allocation_config(claim, classes, {r.request for r in results})
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


def allocation_config(
    claim: ResourceClaim, classes: Mapping[str, DeviceClass], allocated: set[str]
) -> list[DeviceAllocationConfiguration]:
    """``status.allocation.devices.config`` as kube-scheduler's DRA plugin (1.37) writes it,
    given the request names of the results (``allocated``, "parent/subrequest" where a
    firstAvailable request chose one).

    The configuration of each class a request was allocated from (the chosen subrequest's
    class), once per class, for the requests that used it; then the claim's configurations
    that apply to an allocated request: one naming no request, a request, or a request's chosen
    subrequest (one naming only subrequests not chosen is left out). A configuration that
    applies to every request of the claim is written without ``requests``, as kube-scheduler
    writes it (checked against it on a real cluster by
    tests/kube/test_kube_dra_as_kube_scheduler.py); a driver reads both forms the same.
    """
    chosen: dict[str, str] = {}  # request name -> the name its results carry
    class_of: dict[str, str] = {}  # that name -> the class it was allocated from
    for request in claim.spec.devices.requests:
        if request.exactly is not None:
            chosen[request.name] = request.name
            class_of[request.name] = request.exactly.device_class_name
        for sub in request.first_available or ():
            taken = f"{request.name}/{sub.name}"
            if taken in allocated:
                chosen[request.name] = taken
                class_of[taken] = sub.device_class_name
                break

    def covers(requests: Sequence[str]) -> bool:
        return all(r in requests or c in requests for r, c in chosen.items())

    def entry(
        source: Literal["FromClass", "FromClaim"],
        requests: list[str],
        opaque: OpaqueDeviceConfiguration | None,
    ) -> DeviceAllocationConfiguration:
        kept = [] if covers(requests) else requests
        return DeviceAllocationConfiguration(source=source, requests=kept, opaque=opaque)

    config: list[DeviceAllocationConfiguration] = []
    by_class: dict[str, list[str]] = {}
    for taken in chosen.values():
        by_class.setdefault(class_of[taken], []).append(taken)
    for class_name, requests in by_class.items():
        device_class = classes.get(class_name)
        for class_config in device_class.spec.config if device_class else ():
            config.append(entry("FromClass", requests, class_config.opaque))
    for claim_config in claim.spec.devices.config:
        named = list(claim_config.requests)
        if not named or any(r in named or c in named for r, c in chosen.items()):
            config.append(entry("FromClaim", named, claim_config.opaque))
    return config


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
    # A shareable device may serve several requests (one share each): a node that has one is
    # never refused by counting devices.
    anywhere = bool(inventory.shareable.get(ALL_NODES) or inventory.shareable.get(BY_SELECTOR))
    for node in candidates:
        if (
            not anywhere
            and not inventory.shareable.get(node)
            and len(inventory.by_node.get(node, ())) + shared - held.get(node, 0) < minimum
        ):
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
        set_aside = tuple(
            f"pool {pool} of {driver} is set aside: {why}"
            for (driver, pool), why in sorted(inventory.unusable_pools.items())
        )
        return PodAllocation(None, ("no node publishes any device", *set_aside), {})
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
    search = Search(plan, node, devices, inventory, state)
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
