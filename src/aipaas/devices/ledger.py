"""The device ledger: what the scheduler's filter, score, reserve and unreserve steps call.

Who calls it: a scheduler plugin (DeviceFit / Topology) and the controller when it rebuilds the
ledger from stored claims. Pure: the caller persists what ``reserve`` returns.

One ledger per scheduling snapshot: the inventory (slices), the classes, and who holds what.
``reserve`` holds a pod's devices under an owner key (the pod / task replica);
``unreserve(owner)`` gives them back and is idempotent (kube-scheduler's Reserve/Unreserve).

Shared claims (Kubernetes semantics): a claim with ``metadata.uid`` is one object, whoever
references it. It is allocated once, by its first consumer; later consumers only join it and
must run on a node that reaches its devices (for node-local devices, that node). Its devices
are given back when its last consumer of this snapshot unreserves. A claim that arrives with
``status.allocation`` (allocated in an earlier cycle) is held already (``from_claims``): its
consumers are only pinned to its node. Claims without a uid (compiled short forms, template
claims, test shapes) belong to the pod that reserves them.

A running pod's stored claims are held from the start (``from_claims``) but owned by nobody
until ``adopt`` gives them to the pod: then ``unreserve`` frees them as it frees what
``reserve`` took, so that an eviction's what-if (preempt, reclaim) sees the devices a victim
would leave. What an owner gave back is kept until ``hold_again`` takes it back (a discarded
what-if, or a victim that keeps its devices until its stop is confirmed).

Work that does not use claims (the count-based GPU path, e.g. fractions of a GPU) holds whole
GPU devices through ``hold_gpus``, shared among such owners, so claims never get a GPU that
such work is using.

By topic: this module (filter, score, reserve, unreserve, results), ledger_adopt.py
(``adopt``, ``hold_again``), ledger_gpus.py (the count-based GPU path), ledger_units.py (a
claim's unit of held devices).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from aipaas.api.devices import AllocationResult, DeviceClass, ResourceClaim
from aipaas.devices.allocator import NodeAllocation, allocate_on_node
from aipaas.devices.inventory import (
    COUNTERS,
    DeviceId,
    InUse,
    Inventory,
    hold,
    node_matches,
    release,
)
from aipaas.devices.ledger_adopt import Adoption
from aipaas.devices.ledger_gpus import CountGpus, gpu_index
from aipaas.devices.ledger_units import Unit, reaches, shared_key, where
from aipaas.devices.picks import Pick
from aipaas.devices.records import ALL_NODES, BY_SELECTOR
from aipaas.devices.requests import Plan, make_plan

__all__ = ["DeviceLedger", "gpu_index"]


#: ``InUse.touched`` keys whose change any node may see
_EVERY_NODE = frozenset({ALL_NODES, BY_SELECTOR, COUNTERS})


@dataclass
class _ShapeView:
    """One pod shape's fits by node (``DeviceLedger._fits_on``), and how much of
    ``InUse.touched`` they have seen."""

    fits: dict[str, NodeAllocation | None]
    seen: int = 0


@dataclass
class DeviceLedger(Adoption, CountGpus):
    """Inventory, classes and holdings of one snapshot."""

    inventory: Inventory
    classes: Mapping[str, DeviceClass]
    in_use: InUse = field(default_factory=InUse)
    reserved: dict[str, NodeAllocation] = field(default_factory=dict)
    _units: dict[str, Unit] = field(default_factory=dict)
    _owned: dict[str, list[str]] = field(default_factory=dict)  # owner -> unit keys
    _gpu_users: dict[DeviceId, list[str]] = field(default_factory=dict)  # hold_gpus owners
    _gpus_of: dict[str, list[DeviceId]] = field(default_factory=dict)
    #: owner -> the units it gave back last (unit key, unit), for ``hold_again``
    _given_back: dict[str, list[tuple[str, Unit]]] = field(default_factory=dict)
    #: (pod shape, node) -> (the node's stamp, where the shape fits there or None): ``_fit``
    _fits: dict[tuple[str, str], tuple[tuple[int, int, int, int], NodeAllocation | None]] = field(
        default_factory=dict
    )
    #: (pod shape, node) -> (the node's stamp, why the shape does not fit there or None):
    #: ``_reason``, the same memo for explanations (a backlog of pods that fit nowhere is
    #: explained once per shape and state of each node, not once per pod and session)
    _reasons: dict[tuple[str, str], tuple[tuple[int, int, int, int], str | None]] = field(
        default_factory=dict
    )
    #: pod shape -> ``_fit`` on every node of the last call, and how much of
    #: ``in_use.touched`` it had seen (``_fits_on``)
    _views: dict[str, _ShapeView] = field(default_factory=dict)
    #: pod shape -> ``explain``'s last answer for pods of no pinned claim: how much of
    #: ``in_use.touched`` it had seen, the nodes, the reasons (a backlog of pods of one shape
    #: that fit nowhere is explained once while nothing changes)
    _explained: dict[str, tuple[int, list[str], dict[str, int]]] = field(default_factory=dict)

    @classmethod
    def from_claims(
        cls,
        inventory: Inventory,
        classes: Mapping[str, DeviceClass],
        allocated: Iterable[ResourceClaim],
    ) -> DeviceLedger:
        """A ledger holding what already-allocated claims hold."""
        return cls(inventory, classes, inventory.in_use(allocated))

    # -- filter and score -------------------------------------------------------------------

    def feasible(self, claims: Sequence[ResourceClaim], nodes: Sequence[str]) -> list[bool]:
        """Filter: for each node (in order), can all the pod's claims be allocated there?"""
        fresh = self._fresh(claims)
        pinned = self._pinned(claims, fresh)
        if not fresh:
            return [not pinned or self._pinned_reason(claims, node) is None for node in nodes]
        fits = self._fits_on(_shape(fresh), make_plan(fresh, self.classes), nodes)
        if not pinned:
            return [fit is not None for fit in fits]
        return [
            fit is not None and self._pinned_reason(claims, node) is None
            for node, fit in zip(nodes, fits, strict=True)
        ]

    def _fits_on(self, shape: str, plan: Plan, nodes: Sequence[str]) -> list[NodeAllocation | None]:
        """``_fit`` on each of ``nodes``, kept per shape and node and forgotten for the nodes
        whose holdings changed since (``InUse.touched``): a pod is filtered and scored against
        every node, one after another, and between two pods only the node the first took
        changes. A change that every node may see (devices any node reaches, shared counters)
        forgets every node's answer."""
        touched = self.in_use.touched
        view = self._views.get(shape)
        if view is None:
            view = self._views[shape] = _ShapeView({})
        elif view.seen < len(touched):
            changed = set(touched[view.seen :])
            if changed & _EVERY_NODE:
                view.fits.clear()
            else:
                for node in changed:
                    view.fits.pop(node, None)
        fits = view.fits
        out = []
        for node in nodes:
            if node in fits:
                out.append(fits[node])
            else:
                fit = fits[node] = self._fit(shape, plan, node)
                out.append(fit)
        # what the searches just made touched is as it was before them (each gives back what
        # it held): the answers stand
        view.seen = len(touched)
        return out

    @staticmethod
    def _pinned(claims: Sequence[ResourceClaim], fresh: Sequence[ResourceClaim]) -> bool:
        """Whether some claim of the pod is allocated already, or joined in this snapshot (only
        then does ``_pinned_reason`` refuse a node: asked once per pod, not once per node)."""
        return len(fresh) != len(claims)

    def _fit(self, shape: str, plan: Plan, node: str) -> NodeAllocation | None:
        """Where the plan's claims would go on ``node`` now (None: they do not fit), answered
        once per pod shape and state of the node: a pod is filtered and scored against every
        node, and only the nodes something was held on or given back since change their
        answer (``InUse.stamp``)."""
        cached = self._fits.get((shape, node))
        if cached is not None and cached[0] == self.in_use.stamp(node):
            return cached[1]
        outcome = allocate_on_node(plan, node, self.inventory, self.in_use, explain=False)
        fit = None if isinstance(outcome, str) else outcome
        # the stamp after the search, which holds and gives back as it goes
        self._fits[(shape, node)] = (self.in_use.stamp(node), fit)
        return fit

    def _reason(self, shape: str, plan: Plan, node: str) -> str | None:
        """Why the plan's claims do not fit on ``node`` now (None: they fit), answered once per
        pod shape and state of the node, as ``_fit`` is."""
        cached = self._reasons.get((shape, node))
        if cached is not None and cached[0] == self.in_use.stamp(node):
            return cached[1]
        outcome = allocate_on_node(plan, node, self.inventory, self.in_use)
        reason = outcome if isinstance(outcome, str) else None
        self._reasons[(shape, node)] = (self.in_use.stamp(node), reason)
        return reason

    def explain(self, claims: Sequence[ResourceClaim], nodes: Sequence[str]) -> dict[str, int]:
        """Why nodes cannot take the pod: reason -> number of nodes (fitting nodes left out)."""
        fresh = self._fresh(claims)
        plan = make_plan(fresh, self.classes)
        shape = _shape(fresh)
        pinned = self._pinned(claims, fresh)
        touched = self.in_use.touched
        known = self._explained.get(shape)
        if not pinned and known is not None and known[0] == len(touched) and known[1] == nodes:
            return dict(known[2])  # nothing was held or given back since: the same answer
        reasons: dict[str, int] = {}
        for node in nodes:
            outcome = self._pinned_reason(claims, node) if pinned else None
            if outcome is None and fresh:
                outcome = self._reason(shape, plan, node)
            if outcome is not None:
                reasons[outcome] = reasons.get(outcome, 0) + 1
        if not pinned:  # (the searches above each gave back what they held)
            self._explained[shape] = (len(touched), list(nodes), dict(reasons))
        return reasons

    def score(self, claims: Sequence[ResourceClaim], nodes: Sequence[str]) -> list[int]:
        """Topology score 0..100 of the placement each node would get (0 where it does not fit;
        100 where the pod only joins claims allocated already)."""
        fresh = self._fresh(claims)
        plan = make_plan(fresh, self.classes)
        pinned = self._pinned(claims, fresh)
        if not fresh:
            return [
                0 if pinned and self._pinned_reason(claims, node) is not None else 100
                for node in nodes
            ]
        fits = self._fits_on(_shape(fresh), plan, nodes)
        return [
            0
            if fit is None or (pinned and self._pinned_reason(claims, node) is not None)
            else int(fit.score)
            for node, fit in zip(nodes, fits, strict=True)
        ]

    # -- reserve and unreserve --------------------------------------------------------------

    def reserve(
        self, owner: str, claims: Sequence[ResourceClaim], node: str
    ) -> NodeAllocation | str:
        """Allocate the pod's claims on ``node`` and hold them under ``owner``; or the reason.

        The allocation returned holds only the devices held now (claims joined or allocated
        earlier add none). Reserving again for the same owner first gives back what it held.
        """
        self.unreserve(owner)
        self._given_back.pop(owner, None)  # a new allocation: what it held before is gone
        pinned = self._pinned_reason(claims, node)
        if pinned is not None:
            return pinned
        fresh = self._fresh(claims)
        allocation = NodeAllocation(node, (), 100.0)
        if fresh:
            # One node: its search alone (it leaves the holdings as found), not allocate_pod's,
            # which copies every holding of the snapshot first and counts each node's.
            outcome = allocate_on_node(
                make_plan(fresh, self.classes), node, self.inventory, self.in_use
            )
            if isinstance(outcome, str):
                return outcome
            allocation = outcome
        keys = []
        fresh_ids = {id(c) for c in fresh}
        for claim in claims:
            key = shared_key(claim)
            if key is not None and key in self._units:
                self._units[key].consumers.append(owner)  # joins a claim of this snapshot
                keys.append(key)
            elif id(claim) in fresh_ids:
                name = claim.metadata.name or ""
                picks = tuple(p for p in allocation.picks if p.claim == name)
                for pick in picks:
                    if not pick.admin:
                        hold(self.in_use, pick.device, pick.consumed)
                        self.in_use.holders.setdefault(pick.device.id, []).append(owner)
                key = key if key is not None else f"{owner}\0{name}"
                self._units[key] = Unit(node, picks, [owner])
                keys.append(key)
        self._owned[owner] = keys
        self.reserved[owner] = allocation
        return allocation

    def unreserve(self, owner: str) -> list[Pick]:
        """Give back what ``owner`` holds; the picks whose devices became free (a shared claim's
        devices are freed with its last consumer). Nothing happens when it holds nothing."""
        self.reserved.pop(owner, None)
        self._release_gpus(owner)
        freed: list[Pick] = []
        keys = self._owned.pop(owner, [])
        if keys:
            self._given_back[owner] = [(key, self._units[key]) for key in keys]
        for key in keys:
            unit = self._units[key]
            unit.consumers.remove(owner)
            if unit.consumers:
                continue
            del self._units[key]
            for pick in reversed(unit.picks):
                if pick.admin:
                    continue
                release(self.in_use, pick.device, pick.consumed)
                holders = self.in_use.holders.get(pick.device.id, [])
                if self.in_use.is_free(pick.device.id):
                    holders.clear()  # an adopted claim's holder is its claim's name
                elif owner in holders:
                    holders.remove(owner)
                freed.append(pick)
        return freed

    def results(self, owner: str, claims: Sequence[ResourceClaim]) -> dict[str, AllocationResult]:
        """``status.allocation`` per claim name of what ``owner`` uses (to persist): claims it
        allocated or joined in this snapshot, and claims that were allocated already."""
        if owner not in self.reserved:
            return {}
        out: dict[str, AllocationResult] = {}
        for claim in claims:
            name = claim.metadata.name or ""
            if claim.status is not None and claim.status.allocation is not None:
                out[name] = claim.status.allocation
                continue
            key = shared_key(claim)
            unit = self._units.get(key if key is not None else f"{owner}\0{name}")
            if unit is not None:
                held = NodeAllocation(unit.node, unit.picks, 100.0)
                out[name] = held.allocation_result(claim, self.classes)
        return out

    # -- the count-based GPU path -----------------------------------------------------------

    # -- helpers ----------------------------------------------------------------------------

    def _fresh(self, claims: Sequence[ResourceClaim]) -> list[ResourceClaim]:
        """The claims this pod would allocate (not allocated yet, nor in this snapshot)."""
        return [
            c
            for c in claims
            if (c.status is None or c.status.allocation is None)
            and (shared_key(c) is None or shared_key(c) not in self._units)
        ]

    def _pinned_reason(self, claims: Sequence[ResourceClaim], node: str) -> str | None:
        """Why ``node`` cannot reach a claim the pod shares (allocated already); None if it can."""
        labels = self.inventory.node_labels.get(node, {})
        for claim in claims:
            name = claim.metadata.name or ""
            allocation = claim.status.allocation if claim.status is not None else None
            if allocation is not None:
                if allocation.node_selector is None or node_matches(
                    allocation.node_selector, node, labels
                ):
                    continue
                return (
                    f'claim "{name}" is allocated on {where(allocation.node_selector)}, '
                    "which every task that shares it must run on"
                )
            key = shared_key(claim)
            unit = self._units.get(key) if key is not None else None
            if unit is not None and not reaches(unit, node):
                return (
                    f'claim "{name}" is allocated on node {unit.node}, '
                    "which every task that shares it must run on"
                )
        return None


def _shape(claims: Sequence[ResourceClaim]) -> str:
    """What the fit of a pod's fresh claims depends on of the claims: their specs (the ledger's
    classes and inventory are fixed)."""
    return "\n".join(claim.spec.model_dump_json() for claim in claims)
