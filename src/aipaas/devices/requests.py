"""Claims turned into what the allocator searches: requests, their alternatives and constraints.

Who calls it: the allocator and the diagnosis. Pure.

A request of a claim is ``exactly`` one alternative or ``firstAvailable`` several, tried in
order. An alternative carries the selectors of its device class and its own, already compiled,
and its capacity requests already parsed. Candidate devices are computed per node and kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal

from aipaas.api.devices import (
    BaseDeviceRequest,
    DeviceClass,
    DeviceConstraint,
    DeviceTaint,
    DeviceToleration,
    ResourceClaim,
)
from aipaas.api.quantity import parse_quantity
from aipaas.devices.cel import CompiledSelector, compile_selector
from aipaas.devices.inventory import DeviceInfo, qualify
from aipaas.devices.selection import select_devices

__all__ = [
    "Alternative",
    "ClaimPlan",
    "Plan",
    "RequestPlan",
    "consumed_capacity",
    "make_plan",
    "meets_capacity",
    "static_candidates",
    "tolerates",
]


@dataclass(eq=False, slots=True)
class Alternative:
    """One way to satisfy a request: a device class, selectors, a count or All."""

    claim: str
    name: str  # "request" or "request/subrequest"
    request: str  # the request's own name
    class_name: str
    class_selectors: tuple[CompiledSelector, ...]
    selectors: tuple[CompiledSelector, ...]
    all_mode: bool
    count: int
    admin: bool
    capacity: dict[str, Decimal]
    tolerations: tuple[DeviceToleration, ...]
    class_missing: bool = False
    candidates: dict[str, list[DeviceInfo]] = field(default_factory=dict)
    #: what ``static_candidates`` depends on: alternatives of equal keys select the same
    #: devices of a node (the inventory caches them across pods: search.py)
    static_key: tuple[object, ...] = ()
    #: driver -> ``capacity`` with its names qualified by that driver (read per device)
    qualified_capacity: dict[str, dict[str, Decimal]] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class RequestPlan:
    claim_index: int
    alternatives: list[Alternative]


@dataclass(eq=False, slots=True)
class ClaimPlan:
    name: str
    constraints: list[DeviceConstraint]


@dataclass(eq=False, slots=True)
class Plan:
    claims: list[ClaimPlan]
    requests: list[RequestPlan]

    def constraints_for(self, alternative: Alternative, claim_index: int) -> list[int]:
        """Indexes (into the claim's constraints) of the constraints that cover an alternative."""
        covering = []
        for index, constraint in enumerate(self.claims[claim_index].constraints):
            names = constraint.requests
            if not names or alternative.request in names or alternative.name in names:
                covering.append(index)
        return covering


def make_plan(claims: Sequence[ResourceClaim], classes: Mapping[str, DeviceClass]) -> Plan:
    """Compile the claims of one pod (in order) against the known device classes."""
    plan = Plan([], [])
    for claim_index, claim in enumerate(claims):
        claim_name = claim.metadata.name or claim.metadata.generate_name or f"claim-{claim_index}"
        devices = claim.spec.devices
        plan.claims.append(ClaimPlan(claim_name, list(devices.constraints)))
        for request in devices.requests:
            if request.exactly is not None:
                alternatives = [
                    _alternative(
                        claim_name,
                        request.name,
                        request.name,
                        request.exactly,
                        bool(request.exactly.admin_access),
                        classes,
                    )
                ]
            else:
                alternatives = [
                    _alternative(
                        claim_name, f"{request.name}/{sub.name}", request.name, sub, False, classes
                    )
                    for sub in request.first_available or ()
                ]
            plan.requests.append(RequestPlan(claim_index, alternatives))
    return plan


def consumed_capacity(device: DeviceInfo, alternative: Alternative) -> dict[str, Decimal] | None:
    """What one allocation of a shareable device takes of each capacity; None if impossible.

    Follows the device's requestPolicy: an unrequested capacity takes the policy's default (or
    the whole value when there is no policy); a requested one is rounded up to the next valid
    value, or to ``min + k * step`` of the valid range.
    """
    consumed: dict[str, Decimal] = {}
    requested = _requested(alternative, device.driver)
    for key, total in device.capacity.items():
        policy = device.policies.get(key)
        wanted = requested.get(key)
        if wanted is None:
            amount = parse_quantity(policy.default) if policy and policy.default else total
        elif policy is None:
            amount = wanted
        elif policy.valid_values:
            options = sorted(parse_quantity(v) for v in policy.valid_values)
            fitting = [v for v in options if v >= wanted]
            if not fitting:
                return None
            amount = fitting[0]
        elif policy.valid_range is not None:
            low = parse_quantity(policy.valid_range.min)
            amount = max(wanted, low)
            if policy.valid_range.step is not None:
                step = parse_quantity(policy.valid_range.step)
                steps = ((amount - low) / step).to_integral_value(rounding=ROUND_CEILING)
                amount = low + steps * step
            if policy.valid_range.max is not None and amount > parse_quantity(
                policy.valid_range.max
            ):
                return None
        else:
            amount = wanted
        if amount > total:
            return None
        consumed[key] = amount
    for key in requested:
        if key not in device.capacity:
            return None
    return consumed


def meets_capacity(device: DeviceInfo, alternative: Alternative) -> bool:
    """Static check: the device has every requested capacity, and enough of it."""
    if not alternative.capacity:
        return True
    if device.multiple:
        return consumed_capacity(device, alternative) is not None
    requested = _requested(alternative, device.driver)
    return all(device.capacity.get(k, Decimal(-1)) >= v for k, v in requested.items())


def tolerates(device: DeviceInfo, alternative: Alternative) -> bool:
    """Every NoSchedule/NoExecute taint of the device is tolerated by the request (a taint
    of effect None only informs: it keeps nothing off the device)."""
    for taint in device.taints:
        if taint.effect == "None":
            continue
        if not any(
            _tolerates(t, taint.key, taint.value, taint.effect) for t in alternative.tolerations
        ):
            return False
    return True


def static_candidates(
    alternative: Alternative, devices: list[DeviceInfo]
) -> tuple[list[DeviceInfo], list[str]]:
    """Devices the class and request select (with capacity and tolerations), and CEL errors."""
    if alternative.class_missing:
        return [], []
    chosen, errors = select_devices(alternative.class_selectors + alternative.selectors, devices)
    chosen = [d for d in chosen if meets_capacity(d, alternative) and tolerates(d, alternative)]
    return chosen, errors


def tolerated(tolerations: Iterable[DeviceToleration], taint: DeviceTaint) -> bool:
    """Whether any of ``tolerations`` tolerates ``taint`` (key, value, effect)."""
    return any(_tolerates(t, taint.key, taint.value, taint.effect) for t in tolerations)


def _tolerates(toleration: DeviceToleration, key: str, value: str | None, effect: str) -> bool:
    if toleration.effect is not None and toleration.effect != effect:
        return False
    if toleration.key is None:
        return toleration.operator == "Exists"
    if toleration.key != key:
        return False
    return toleration.operator == "Exists" or toleration.value == value


def _qualified(capacity: Mapping[str, Decimal], driver: str) -> dict[str, Decimal]:
    return {"/".join(qualify(k, driver)): v for k, v in capacity.items()}


def _requested(alternative: Alternative, driver: str) -> dict[str, Decimal]:
    """The alternative's capacity requests as a device of ``driver`` names them (memoized:
    asked for every device of every node a pod is filtered against)."""
    found = alternative.qualified_capacity.get(driver)
    if found is None:
        found = alternative.qualified_capacity[driver] = _qualified(alternative.capacity, driver)
    return found


def _alternative(
    claim: str,
    name: str,
    request: str,
    body: BaseDeviceRequest,
    admin: bool,
    classes: Mapping[str, DeviceClass],
) -> Alternative:
    device_class = classes.get(body.device_class_name)
    class_selectors: Iterable[str] = (
        [s.cel.expression for s in device_class.spec.selectors] if device_class else []
    )
    capacity = body.capacity.requests if body.capacity else {}
    parsed = {k: parse_quantity(v) for k, v in capacity.items()}
    static_key = (
        device_class is None,
        tuple(class_selectors),
        tuple(s.cel.expression for s in body.selectors),
        tuple(sorted(parsed.items())),
        tuple((t.key, t.operator, t.value, t.effect) for t in body.tolerations),
    )
    return Alternative(
        claim=claim,
        name=name,
        request=request,
        class_name=body.device_class_name,
        class_selectors=tuple(compile_selector(e) for e in class_selectors),
        selectors=tuple(compile_selector(s.cel.expression) for s in body.selectors),
        all_mode=body.allocation_mode == "All",
        count=body.wanted,
        admin=admin,
        capacity=parsed,
        tolerations=tuple(body.tolerations),
        class_missing=device_class is None,
        static_key=static_key,
    )
