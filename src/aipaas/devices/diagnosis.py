"""Why a pod's claims do not fit on a node, in one sentence.

Who calls it: the allocator, after its search failed on a node. Pure.

Checks run from the broadest to the narrowest, and the first that fails is the reason:
device class exists -> class selectors -> request selectors (each named) -> capacity asked ->
taints -> enough free devices (in use / shared counters taken / capacity used up) -> the
claim's constraints (matchAttribute: "no NVLink domain has 4 free"; distinctAttribute) ->
otherwise the requests compete with each other for the same devices.
"""

from __future__ import annotations

from decimal import Decimal

from aipaas.api.quantity import format_quantity
from aipaas.devices.inventory import DeviceInfo, InUse, Inventory
from aipaas.devices.requests import (
    Alternative,
    Plan,
    consumed_capacity,
    meets_capacity,
    tolerates,
)
from aipaas.devices.selection import select_devices
from aipaas.devices.topology import level_label

__all__ = ["diagnose"]


def diagnose(
    plan: Plan, node: str, devices: list[DeviceInfo], inventory: Inventory, state: InUse
) -> str:
    """The reason the plan does not fit on the node (the search already failed there)."""
    free_by_alternative: dict[int, list[DeviceInfo]] = {}
    for request in plan.requests:
        problems = []
        for alternative in request.alternatives:
            problem, free = _alternative_problem(alternative, devices, inventory, state)
            free_by_alternative[id(alternative)] = free
            if problem is None:
                break
            problems.append((alternative, problem))
        else:
            if len(problems) == 1:
                alternative, problem = problems[0]
                return f'claim "{alternative.claim}" request "{alternative.name}": {problem}'
            first = problems[0][0]
            details = "; ".join(f'"{a.name}": {p}' for a, p in problems)
            return (
                f'claim "{first.claim}" request "{first.request}": no subrequest of '
                f"firstAvailable fits: {details}"
            )
    for claim_index, claim in enumerate(plan.claims):
        for constraint in claim.constraints:
            alternatives = [
                r.alternatives[0]
                for r in plan.requests
                if r.claim_index == claim_index
                and (
                    not constraint.requests
                    or r.alternatives[0].request in constraint.requests
                    or r.alternatives[0].name in constraint.requests
                )
            ]
            problem = _constraint_problem(
                constraint.match_attribute,
                constraint.distinct_attribute,
                alternatives,
                free_by_alternative,
            )
            if problem is not None:
                return f'claim "{claim.name}": {problem}'
    return (
        "the requests cannot be satisfied together: they compete for the same free devices "
        "or shared counters"
    )


def _alternative_problem(
    alternative: Alternative, devices: list[DeviceInfo], inventory: Inventory, state: InUse
) -> tuple[str | None, list[DeviceInfo]]:
    if alternative.class_missing:
        return f'device class "{alternative.class_name}" does not exist', []
    chosen, errors = select_devices(alternative.class_selectors, devices)
    if errors:
        return errors[0], []
    if not chosen:
        return f'no device matches device class "{alternative.class_name}"', []
    for selector in alternative.selectors:
        chosen, errors = select_devices([selector], chosen)
        if errors:
            return errors[0], []
        if not chosen:
            return f"no device matches selector {selector.expression!r}", []
    if alternative.capacity:
        chosen = [d for d in chosen if meets_capacity(d, alternative)]
        if not chosen:
            asked = ", ".join(f"{k}: {format_quantity(v)}" for k, v in alternative.capacity.items())
            return f"no matching device has the capacity requested ({asked})", []
    tolerated = [d for d in chosen if tolerates(d, alternative)]
    if not tolerated:
        return "every matching device has a taint the request does not tolerate", []
    chosen = tolerated
    free, in_use, counters, capacity = _split_free(chosen, alternative, inventory, state)
    needed = len(chosen) if alternative.all_mode else alternative.count
    busy = len(chosen) - len(free)
    if alternative.all_mode and busy:
        return (
            f"allocationMode All needs every one of the {len(chosen)} matching devices, "
            f"but {busy} {'is' if busy == 1 else 'are'} not free"
            f"{_causes(in_use, counters, capacity)}"
        ), free
    # A free shareable device may serve several of the devices asked for (one share each).
    if len(free) < needed and not any(d.multiple for d in free):
        noun = "device matches" if len(chosen) == 1 else "devices match"
        return (
            f"needs {needed} device{'s' if needed != 1 else ''}: {len(chosen)} {noun} but "
            f"only {len(free)} {'is' if len(free) == 1 else 'are'} free"
            f"{_causes(in_use, counters, capacity)}"
        ), free
    return None, free


def _split_free(
    devices: list[DeviceInfo], alternative: Alternative, inventory: Inventory, state: InUse
) -> tuple[list[DeviceInfo], int, int, int]:
    free: list[DeviceInfo] = []
    in_use = counters = capacity = 0
    for device in devices:
        if alternative.admin:
            free.append(device)
            continue
        if device.id in state.devices or (not device.multiple and state.shares.get(device.id)):
            in_use += 1
            continue
        if device.multiple:
            consumed = consumed_capacity(device, alternative) or {}
            used = state.capacity.get(device.id, {})
            if any(used.get(k, Decimal(0)) + v > device.capacity[k] for k, v in consumed.items()):
                capacity += 1
                continue
            if state.shares.get(device.id):
                free.append(device)
                continue
        if not _counters_fit(device, inventory, state):
            counters += 1
            continue
        free.append(device)
    return free, in_use, counters, capacity


def _counters_fit(device: DeviceInfo, inventory: Inventory, state: InUse) -> bool:
    for key, wanted in device.consumes:
        total = inventory.counter_sets.get(key, {})
        used = state.counters.get(key, {})
        for name, amount in wanted.items():
            if used.get(name, Decimal(0)) + amount > total.get(name, Decimal(-1)):
                return False
    return True


def _causes(in_use: int, counters: int, capacity: int) -> str:
    parts = []
    if in_use:
        parts.append(f"{in_use} allocated")
    if counters:
        parts.append(
            f"{counters} blocked by shared counters in use (a partitionable device is used "
            "whole or as partitions, never both)"
        )
    if capacity:
        parts.append(f"{capacity} without enough capacity left")
    return f" ({'; '.join(parts)})" if parts else ""


def _constraint_problem(
    match_attribute: str | None,
    distinct_attribute: str | None,
    alternatives: list[Alternative],
    free_by_alternative: dict[int, list[DeviceInfo]],
) -> str | None:
    needed = sum(a.count for a in alternatives if not a.all_mode)
    pool: dict[tuple[str, str, str], DeviceInfo] = {}
    for alternative in alternatives:
        for device in free_by_alternative.get(id(alternative), []):
            pool[device.id] = device
    devices = list(pool.values())
    if match_attribute is not None:
        groups: dict[object, int] = {}
        for device in devices:
            value = device.attribute(match_attribute)
            if value is not None:
                groups[value] = groups.get(value, 0) + (needed if device.multiple else 1)
        largest = max(groups.values(), default=0)
        if largest < needed:
            label = level_label(match_attribute)
            if not groups:
                return f"no free matching device has the attribute {match_attribute}"
            return (
                f"{len(devices)} matching devices are free but no {label} has {needed} free "
                f"(matchAttribute {match_attribute}; the most in one is {largest})"
            )
    if distinct_attribute is not None:
        values = {d.attribute(distinct_attribute) for d in devices} - {None}
        if len(values) < needed:
            return (
                f"needs {needed} devices with distinct values of {distinct_attribute}, "
                f"but the free matching devices have only {len(values)}"
            )
    return None
