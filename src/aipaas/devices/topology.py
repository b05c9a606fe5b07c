"""Topology: which devices belong together, how to order candidates, how to score a placement.

Who calls it: the allocator (candidate order, placement score), the scheduler's topology
plugin (``score_placement``), reasons (``node_class``, ``level_label``). Pure.

Levels are read from device attributes by short name in any domain: ``nvlinkDomain`` (devices
that talk over NVLink), ``numaNode`` and ``pcieRoot``. Tighter is better: one NVLink domain over
two, one NUMA node over two; and a placement that leaves whole domains free is better than one
that breaks into a free domain when a partly used one would do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final

from aipaas.devices.inventory import DeviceInfo, InUse

if TYPE_CHECKING:
    from aipaas.devices.picks import Pick

__all__ = [
    "LEVELS",
    "level_label",
    "level_value",
    "node_class",
    "order_candidates",
    "score_placement",
]

LEVELS: Final = (("nvlinkDomain", 40.0), ("numaNode", 15.0), ("pcieRoot", 5.0))
"""Topology levels by short attribute name, with the score lost per extra domain spanned."""
BROKEN_DOMAIN_PENALTY: Final = 10.0
_LABELS: Final = {"nvlinkDomain": "NVLink domain", "numaNode": "NUMA node", "pcieRoot": "PCIe root"}
_MODEL_ATTRIBUTES: Final = ("model", "productName", "type")


def level_value(device: DeviceInfo, short_name: str) -> object:
    """The device's value for a topology level (its driver's domain first), or None."""
    return device.short.get(short_name)


def level_label(qualified_name: str) -> str:
    """A human name for an attribute used in a constraint: "NVLink domain" for nvlinkDomain."""
    short = qualified_name.rpartition("/")[2]
    return _LABELS.get(short, f"value of {qualified_name}")


def order_candidates(devices: list[DeviceInfo], needed: int, state: InUse) -> list[DeviceInfo]:
    """Candidates in the order the search should try them.

    Free devices first, grouped by NVLink domain, then NUMA node, then PCIe root: at each level
    the groups that can hold the whole request come first, smallest first (best fit, so large
    domains stay whole); then the others, largest first (fewest domains spanned). Shareable
    devices already shared come before untouched ones (pack shares). Devices in use go last;
    the search skips them.
    """
    free: list[DeviceInfo] = []
    busy: list[DeviceInfo] = []
    for device in devices:
        (free if device.id not in state.devices else busy).append(device)
    if len(free) <= 1:
        return free + busy
    levels = [name for name, _ in LEVELS if any(level_value(d, name) is not None for d in free)]
    if not levels:
        shared = [d for d in free if state.shares.get(d.id)]
        if shared and len(shared) < len(free):
            untouched = [d for d in free if not state.shares.get(d.id)]
            return shared + untouched + busy
        return free + busy
    return _by_levels(free, needed, levels) + busy


def _by_levels(devices: list[DeviceInfo], needed: int, levels: list[str]) -> list[DeviceInfo]:
    """Best fit at the first level, then the same rule inside each group at the next."""
    if not levels or len(devices) <= 1:
        return devices
    groups: dict[object, list[DeviceInfo]] = {}
    for device in devices:
        groups.setdefault(level_value(device, levels[0]), []).append(device)
    ordered = sorted(
        groups.values(),
        key=lambda g: (0, len(g)) if len(g) >= needed else (1, -len(g)),
    )
    return [d for group in ordered for d in _by_levels(group, min(needed, len(group)), levels[1:])]


def score_placement(picks: Sequence[Pick], devices: Sequence[DeviceInfo], state: InUse) -> float:
    """0..100, higher is tighter; ``state`` already holds the picks.

    For each level: minus its weight per domain spanned beyond the fewest possible; minus
    BROKEN_DOMAIN_PENALTY per NVLink domain that was wholly free and is now partly used.
    """
    picked = [p.device for p in picks if not p.admin and p.consumed is None]
    if not picked:
        return 100.0
    picked_ids = {d.id for d in picked}
    score = 100.0
    for level, weight in LEVELS:
        spanned = {level_value(d, level) for d in picked} - {None}
        if not spanned:
            continue
        free_before: dict[object, int] = {}
        for device in devices:
            value = level_value(device, level)
            if value is not None and (device.id not in state.devices or device.id in picked_ids):
                free_before[value] = free_before.get(value, 0) + 1
        wanted = sum(1 for d in picked if level_value(d, level) is not None)
        score -= weight * (len(spanned) - _fewest_domains(free_before.values(), wanted))
        if level == LEVELS[0][0]:
            broken = _broken(devices, level, spanned, picked_ids, state)
            unavoidable = _must_break(devices, level, wanted, state, picked_ids)
            score -= BROKEN_DOMAIN_PENALTY * max(broken - unavoidable, 0)
    return max(score, 0.0)


def node_class(devices: Iterable[DeviceInfo]) -> str:
    """A short description of a node's devices, used to group reasons: "[8x H100]"."""
    counts: dict[str, int] = {}
    for device in devices:
        if device.consumes and not _is_whole(device):
            continue  # partitions are described by their parent
        label = _model(device)
        counts[label] = counts.get(label, 0) + 1
    if not counts:
        return "[no devices]"
    return "[" + ", ".join(f"{n}x {label}" for label, n in sorted(counts.items())) + "]"


def _fewest_domains(sizes: Iterable[int], wanted: int) -> int:
    count = 0
    for size in sorted(sizes, reverse=True):
        if wanted <= 0:
            break
        wanted -= size
        count += 1
    return max(count, 1)


def _must_break(
    devices: Sequence[DeviceInfo],
    level: str,
    wanted: int,
    state: InUse,
    picked_ids: set[tuple[str, str, str]],
) -> int:
    """0 when the partly used domains had room for the request, else 1."""
    members: dict[object, list[DeviceInfo]] = {}
    for device in devices:
        value = level_value(device, level)
        if value is not None:
            members.setdefault(value, []).append(device)
    room = 0
    for group in members.values():
        free = [d for d in group if d.id not in state.devices or d.id in picked_ids]
        if len(free) < len(group):
            room += len(free)
    return 0 if room >= wanted else 1


def _broken(
    devices: Sequence[DeviceInfo],
    level: str,
    spanned: set[object],
    picked_ids: set[tuple[str, str, str]],
    state: InUse,
) -> int:
    broken = 0
    for value in spanned:
        members = [d for d in devices if level_value(d, level) == value]
        was_free = all(d.id not in state.devices or d.id in picked_ids for d in members)
        now_full = all(d.id in state.devices for d in members)
        if was_free and not now_full:
            broken += 1
    return broken


def _model(device: DeviceInfo) -> str:
    own = device.attributes.get(device.driver, {})
    for name in _MODEL_ATTRIBUTES:
        value = own.get(name)
        if isinstance(value, str):
            return value
    return device.driver


def _is_whole(device: DeviceInfo) -> bool:
    """A partitionable parent (a whole GPU) rather than one of its partitions."""
    own = device.attributes.get(device.driver, {})
    return own.get("type") != "mig" and "profile" not in own
