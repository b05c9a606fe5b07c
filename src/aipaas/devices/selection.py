"""Evaluate CEL selectors on devices, with two caches.

Who calls it: the allocator and `aipaas allocate`. Pure.

1. Per (selector, device): the answer is kept on the device record
   (``DeviceInfo.selector_results``); a replaced slice brings new records, so its answers go.
2. Per (selector, what the selector reads): a selector that reads only
   ``device.attributes["d"].x`` and ``device.capacity["d"].y`` gives the same answer for every
   device with the same x and y, so the library is called once per distinct (x, y). On a cluster
   of identical GPUs a new selector costs a handful of CEL evaluations, not one per device.

An evaluation error (a missing attribute, a type mismatch) is an answer too: it is kept as the
error's text, and the allocator reports it instead of treating the device as unselected
silently.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from aipaas.devices.cel import CelEvalError, CompiledSelector, Path, compile_selector
from aipaas.devices.inventory import DeviceInfo, freeze

__all__ = ["evaluate", "matching", "select_devices"]

_MISSING: Final = ("<missing>",)
_PROJECTION_LIMIT: Final = 65_536
_by_projection: dict[str, dict[tuple[Any, ...], bool | str]] = {}
_flat_only: set[str] = set()  # selectors that read only single values (the fast key)


def evaluate(selector: CompiledSelector | str, device: DeviceInfo) -> bool | str:
    """True/False for a device, or the text of the evaluation error (cached)."""
    if isinstance(selector, str):
        selector = compile_selector(selector)
    answer = device.selector_results.get(selector.expression)
    if answer is None:
        answer = _evaluate_projected(selector, device)
        device.selector_results[selector.expression] = answer
    return answer


def matching(selector: CompiledSelector | str, devices: Iterable[DeviceInfo]) -> list[DeviceInfo]:
    """The devices a selector selects (devices whose evaluation failed are left out)."""
    if isinstance(selector, str):
        selector = compile_selector(selector)
    expression = selector.expression
    selected: list[DeviceInfo] = []
    append = selected.append
    for device in devices:
        answer = device.selector_results.get(expression)
        if answer is True:
            append(device)
        elif answer is None:
            answer = device.selector_results[expression] = _evaluate_projected(selector, device)
            if answer is True:
                append(device)
    return selected


def select_devices(
    selectors: Iterable[CompiledSelector | str], devices: Iterable[DeviceInfo]
) -> tuple[list[DeviceInfo], list[str]]:
    """Devices every selector selects, and the evaluation errors met (one line per error)."""
    compiled = [compile_selector(s) if isinstance(s, str) else s for s in selectors]
    chosen: list[DeviceInfo] = []
    errors: list[str] = []
    for device in devices:
        for selector in compiled:
            answer = evaluate(selector, device)
            if answer is True:
                continue
            if answer is not False:
                errors.append(
                    f"selector {selector.expression!r} failed on device {device.name!r}: {answer}"
                )
            break
        else:
            chosen.append(device)
    return chosen, errors


def _evaluate_projected(selector: CompiledSelector, device: DeviceInfo) -> bool | str:
    paths = selector.paths
    if paths is None:
        return _run(selector, _prefilled(device.cel_value, selector.domains))
    flat = device.flat
    if selector.expression in _flat_only:
        key = tuple([flat.get(path, _MISSING) for path in paths])
    else:
        key = tuple([_read(device, path) for path in paths])
        if all(len(path) == 3 or path == ("driver",) for path in paths):
            _flat_only.add(selector.expression)
    cache = _by_projection.get(selector.expression)
    if cache is None:
        if len(_by_projection) > _PROJECTION_LIMIT:
            _by_projection.clear()
        cache = _by_projection[selector.expression] = {}
    answer = cache.get(key)
    if answer is None:
        if len(cache) > _PROJECTION_LIMIT:
            cache.clear()
        answer = cache[key] = _run(selector, _project(device, paths))
    return answer


def _prefilled(value: dict[str, Any], domains: tuple[str, ...]) -> dict[str, Any]:
    """The whole device, with every domain the expression names present (empty if absent)."""
    if not domains:
        return value
    # A shallow copy keeps every field (allowMultipleAllocations too); the maps are copied
    # before domains are added so the device's own value is left as it was.
    filled = {
        **value,
        "attributes": dict(value["attributes"]),
        "capacity": dict(value["capacity"]),
    }
    for domain in domains:
        filled["attributes"].setdefault(domain, {})
        filled["capacity"].setdefault(domain, {})
    return filled


def _run(selector: CompiledSelector, value: dict[str, Any]) -> bool | str:
    try:
        return selector.evaluate(value)
    except CelEvalError as err:
        return str(err)


def _read(device: DeviceInfo, path: Path) -> Any:
    if path[0] == "driver":
        return device.id[0]
    table = device.cel_value[path[0]]
    if len(path) == 1:
        return freeze(table)
    domain = table.get(path[1])
    if len(path) == 2:
        return freeze(domain) if domain is not None else _MISSING
    if domain is None or path[2] not in domain:
        return _MISSING
    return freeze(domain[path[2]])


def _project(device: DeviceInfo, paths: tuple[Path, ...]) -> dict[str, Any]:
    """A device value holding only what the selector reads; named domains default to {}."""
    value: dict[str, Any] = {"driver": device.id[0], "attributes": {}, "capacity": {}}
    for path in paths:
        if path[0] == "driver":
            continue
        source = device.cel_value[path[0]]
        target = value[path[0]]
        if len(path) == 1:
            target.update({d: dict(m) for d, m in source.items()})
            continue
        domain = target.setdefault(path[1], {})
        if len(path) == 2:
            domain.update(source.get(path[1], {}))
        elif path[2] in source.get(path[1], {}):
            domain[path[2]] = source[path[1]][path[2]]
    return value
