"""The device inventory: ResourceSlices turned into per-node device records the allocator reads.

Who calls it: the allocator, the topology helpers, `aipaas allocate`, the scheduler's snapshot.
Pure; imports aipaas.api.devices and aipaas.api.quantity.

A slice's devices become :class:`DeviceInfo` records (attributes normalised to
``domain -> name -> value``; unqualified names belong to the driver's domain). Replacing a slice
builds new records, so the per-device selector results they carry are dropped with them: that is
how the selector cache is invalidated when a slice changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from aipaas.api.devices import (
    CapacityRequestPolicy,
    DeviceTaint,
    ResourceClaim,
    ResourceSlice,
)
from aipaas.api.quantity import parse_quantity
from aipaas.devices.cel import make_quantity, make_semver

__all__ = [
    "ALL_NODES",
    "BY_SELECTOR",
    "CounterSetKey",
    "DeviceId",
    "DeviceInfo",
    "InUse",
    "Inventory",
    "InventoryError",
    "freeze",
    "hold",
    "node_matches",
    "qualify",
    "release",
]

ALL_NODES: Final = "*"
"""The node key of devices published with ``allNodes: true`` (reachable from every node)."""
BY_SELECTOR: Final = "?"
"""The node key of devices published for the nodes a nodeSelector matches."""

DeviceId = tuple[str, str, str]
"""(driver, pool, device name): unique in a cluster, as in Kubernetes allocation results."""
CounterSetKey = tuple[str, str, str]
"""(driver, pool, counter set name)."""
AttrValue = int | bool | str


class InventoryError(ValueError):
    """Slices that contradict each other (duplicate devices, unknown counter sets)."""


def qualify(name: str, driver: str) -> tuple[str, str]:
    """Split ``domain/name``; an unqualified name belongs to the driver's domain."""
    domain, _, short = name.rpartition("/")
    return (domain or driver), short


@dataclass(eq=False, slots=True)
class DeviceInfo:
    """One device of one slice, ready for selectors, constraints and accounting."""

    id: DeviceId
    node: str
    slice_name: str
    attributes: dict[str, dict[str, AttrValue]]
    versions: frozenset[str]  # "domain/name" of the attributes that are versions
    capacity: dict[str, Decimal]  # "domain/name" -> value
    policies: dict[str, CapacityRequestPolicy]
    consumes: tuple[tuple[CounterSetKey, dict[str, Decimal]], ...]
    multiple: bool
    taints: tuple[DeviceTaint, ...]
    cel_value: dict[str, Any]
    flat: dict[tuple[str, ...], Any] = field(default_factory=dict)
    """("driver",) / ("attributes", domain, name) / ("capacity", domain, name) -> a hashable
    form of the CEL value: what selector caches key on."""
    node_selector: dict[str, Any] | None = None
    qualified: dict[str, AttrValue] = field(default_factory=dict)
    """"domain/name" -> value of every attribute."""
    short: dict[str, AttrValue] = field(default_factory=dict)
    """name -> value, the driver's domain first, then the others (topology lookups)."""
    selector_results: dict[str, bool | str] = field(default_factory=dict)
    """Cache: expression -> True/False, or the evaluation error's message."""

    @property
    def driver(self) -> str:
        return self.id[0]

    @property
    def pool(self) -> str:
        return self.id[1]

    @property
    def name(self) -> str:
        return self.id[2]

    def attribute(self, qualified: str) -> AttrValue | None:
        """The value of ``domain/name``, or None when the device does not have it."""
        value = self.qualified.get(qualified)
        if value is None and "/" not in qualified:
            value = self.qualified.get(f"{self.driver}/{qualified}")
        return value


@dataclass(slots=True)
class InUse:
    """What existing allocations hold: whole devices, counters and shared capacity."""

    devices: set[DeviceId] = field(default_factory=set)
    counters: dict[CounterSetKey, dict[str, Decimal]] = field(default_factory=dict)
    capacity: dict[DeviceId, dict[str, Decimal]] = field(default_factory=dict)
    shares: dict[DeviceId, int] = field(default_factory=dict)
    holders: dict[DeviceId, list[str]] = field(default_factory=dict)

    def copy(self) -> InUse:
        return InUse(
            set(self.devices),
            {k: dict(v) for k, v in self.counters.items()},
            {k: dict(v) for k, v in self.capacity.items()},
            dict(self.shares),
            {k: list(v) for k, v in self.holders.items()},
        )

    def is_free(self, device_id: DeviceId) -> bool:
        """Neither held whole nor shared by anyone."""
        return device_id not in self.devices and not self.shares.get(device_id)


class Inventory:
    """Devices by node, shared counter sets, and the allocations that hold them."""

    def __init__(
        self,
        slices: Iterable[ResourceSlice] = (),
        *,
        node_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.node_labels: dict[str, Mapping[str, str]] = dict(node_labels or {})
        self._slices: dict[str, ResourceSlice] = {}
        self._devices_by_slice: dict[str, list[DeviceInfo]] = {}
        self.by_node: dict[str, list[DeviceInfo]] = {}
        self.by_id: dict[DeviceId, DeviceInfo] = {}
        self.counter_sets: dict[CounterSetKey, dict[str, Decimal]] = {}
        self._counter_owner: dict[CounterSetKey, str] = {}
        for item in slices:
            self.put_slice(item)

    # -- slices -----------------------------------------------------------------------------

    def put_slice(self, item: ResourceSlice) -> None:
        """Add or replace a slice (by metadata.name); its devices get fresh caches."""
        name = _slice_name(item)
        if name in self._slices:
            self.remove_slice(name)
        spec = item.spec
        for counter_set in spec.shared_counters:
            key = (spec.driver, spec.pool.name, counter_set.name)
            if key in self.counter_sets:
                raise InventoryError(
                    f'ResourceSlice "{name}": spec.sharedCounters: counter set '
                    f"{counter_set.name!r} of pool {spec.pool.name!r} is already published by "
                    f'ResourceSlice "{self._counter_owner[key]}"'
                )
            self.counter_sets[key] = {
                n: parse_quantity(c.value) for n, c in counter_set.counters.items()
            }
            self._counter_owner[key] = name
        records = [_device_record(item, name, index) for index in range(len(spec.devices))]
        for record in records:
            if record.id in self.by_id:
                other = self.by_id[record.id].slice_name
                raise InventoryError(
                    f'ResourceSlice "{name}": device {record.name!r} of pool {record.pool!r} is '
                    f'already published by ResourceSlice "{other}"'
                )
            self.by_id[record.id] = record
            self.by_node.setdefault(record.node, []).append(record)
        self._slices[name] = item
        self._devices_by_slice[name] = records

    def remove_slice(self, name: str) -> None:
        """Forget a slice, its devices (and their cached answers) and its counter sets.

        Raises:
            KeyError: no slice of that name.
        """
        del self._slices[name]
        for record in self._devices_by_slice.pop(name):
            del self.by_id[record.id]
            self.by_node[record.node].remove(record)
            if not self.by_node[record.node]:
                del self.by_node[record.node]
        for key in [k for k, owner in self._counter_owner.items() if owner == name]:
            del self.counter_sets[key]
            del self._counter_owner[key]

    @property
    def slices(self) -> list[ResourceSlice]:
        return list(self._slices.values())

    def check_counters(self) -> None:
        """Every counter a device consumes must be published in its pool."""
        for record in self.by_id.values():
            for key, counters in record.consumes:
                known = self.counter_sets.get(key)
                if known is None:
                    raise InventoryError(
                        f'ResourceSlice "{record.slice_name}": device {record.name!r}: '
                        f"consumesCounters: counter set {key[2]!r} is not published in pool "
                        f"{key[1]!r}"
                    )
                for counter in counters:
                    if counter not in known:
                        raise InventoryError(
                            f'ResourceSlice "{record.slice_name}": device {record.name!r}: '
                            f"consumesCounters: counter {counter!r} is not in counter set "
                            f"{key[2]!r}"
                        )

    # -- nodes ------------------------------------------------------------------------------

    @property
    def nodes(self) -> list[str]:
        """Node names with node-local devices (then labelled nodes without), in order."""
        named = [n for n in self.by_node if n not in (ALL_NODES, BY_SELECTOR)]
        return named + [n for n in self.node_labels if n not in self.by_node]

    def devices_for(self, node: str) -> list[DeviceInfo]:
        """Devices a pod on ``node`` can use: its own, the all-nodes ones, and those whose
        slice (or device) nodeSelector matches the node's labels or name."""
        local = self.by_node.get(node, [])
        shared = self.by_node.get(ALL_NODES)
        selected = self.by_node.get(BY_SELECTOR)
        if selected:
            labels = self.node_labels.get(node, {})
            local = local + [d for d in selected if node_matches(d.node_selector, node, labels)]
        return local + shared if shared else local

    # -- allocations that exist -------------------------------------------------------------

    def in_use(self, claims: Iterable[ResourceClaim]) -> InUse:
        """What allocated claims hold (adminAccess results hold nothing).

        Raises:
            InventoryError: an allocation names a device that is not published.
        """
        state = InUse()
        for claim in claims:
            allocation = claim.status.allocation if claim.status else None
            if allocation is None:
                continue
            claim_name = claim.metadata.name or "?"
            for result in allocation.devices.results:
                device_id = (result.driver, result.pool, result.device)
                record = self.by_id.get(device_id)
                if record is None:
                    raise InventoryError(
                        f'ResourceClaim "{claim_name}": status.allocation names device '
                        f"{result.device!r} of pool {result.pool!r}, which is not published"
                    )
                if result.admin_access:
                    continue
                state.holders.setdefault(device_id, []).append(claim_name)
                consumed = {
                    "/".join(qualify(k, record.driver)): parse_quantity(v)
                    for k, v in result.consumed_capacity.items()
                }
                hold(state, record, consumed if record.multiple else None)
        return state


def hold(state: InUse, record: DeviceInfo, consumed: Mapping[str, Decimal] | None) -> None:
    """Mark a device as held: whole (consumed None) or a share of its capacity.

    A shared device consumes its counters once, with its first share.
    """
    if consumed is None:
        state.devices.add(record.id)
    else:
        used = state.capacity.setdefault(record.id, {})
        for name, amount in consumed.items():
            used[name] = used.get(name, Decimal(0)) + amount
        state.shares[record.id] = state.shares.get(record.id, 0) + 1
        if state.shares[record.id] > 1:
            return
    for key, counters in record.consumes:
        used_counters = state.counters.setdefault(key, {})
        for name, amount in counters.items():
            used_counters[name] = used_counters.get(name, Decimal(0)) + amount


def release(state: InUse, record: DeviceInfo, consumed: Mapping[str, Decimal] | None) -> None:
    """Undo :func:`hold` (used by the allocator when it backtracks)."""
    if consumed is None:
        state.devices.discard(record.id)
    else:
        used = state.capacity[record.id]
        for name, amount in consumed.items():
            used[name] -= amount
        state.shares[record.id] -= 1
        if state.shares[record.id] > 0:
            return
    for key, counters in record.consumes:
        used_counters = state.counters[key]
        for name, amount in counters.items():
            used_counters[name] -= amount


def node_matches(selector: Mapping[str, Any] | None, node: str, labels: Mapping[str, str]) -> bool:
    """A Kubernetes NodeSelector: any term matches when all its expressions and fields do."""
    if not selector:
        return False
    for term in selector.get("nodeSelectorTerms", []):
        expressions = term.get("matchExpressions", [])
        fields = term.get("matchFields", [])
        if not expressions and not fields:
            continue
        if all(_requirement(e, labels) for e in expressions) and all(
            _requirement(f, {"metadata.name": node}) for f in fields
        ):
            return True
    return False


def _requirement(rule: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key, operator = rule.get("key", ""), rule.get("operator", "")
    wanted = [str(v) for v in rule.get("values", [])]
    present = key in values
    value = values.get(key, "")
    if operator == "In":
        return present and value in wanted
    if operator == "NotIn":
        return not present or value not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            number, bound = int(value), int(wanted[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def _slice_name(item: ResourceSlice) -> str:
    if item.metadata.name:
        return item.metadata.name
    node = item.spec.node_name or "all"
    return f"{node}-{item.spec.driver}-{item.spec.pool.name}"


def _device_record(item: ResourceSlice, slice_name: str, index: int) -> DeviceInfo:
    spec = item.spec
    device = spec.devices[index]
    driver = spec.driver
    selector: dict[str, Any] | None = None
    if spec.per_device_node_selection:
        node = device.node_name or (ALL_NODES if device.all_nodes else BY_SELECTOR)
        selector = device.node_selector
    elif spec.all_nodes:
        node = ALL_NODES
    elif spec.node_selector is not None:
        node = BY_SELECTOR
        selector = spec.node_selector
    else:
        node = spec.node_name or BY_SELECTOR
    attributes: dict[str, dict[str, AttrValue]] = {}
    cel_attributes: dict[str, dict[str, Any]] = {}
    versions: set[str] = set()
    for qualified, attribute in device.attributes.items():
        domain, name = qualify(qualified, driver)
        value = attribute.value
        attributes.setdefault(domain, {})[name] = value
        if attribute.version is not None:
            versions.add(f"{domain}/{name}")
            cel_attributes.setdefault(domain, {})[name] = make_semver(attribute.version)
        else:
            cel_attributes.setdefault(domain, {})[name] = value
    capacity: dict[str, Decimal] = {}
    policies: dict[str, CapacityRequestPolicy] = {}
    cel_capacity: dict[str, dict[str, Any]] = {}
    for qualified, cap in device.capacity.items():
        domain, name = qualify(qualified, driver)
        key = f"{domain}/{name}"
        capacity[key] = parse_quantity(cap.value)
        cel_capacity.setdefault(domain, {})[name] = make_quantity(cap.value)
        if cap.request_policy is not None:
            policies[key] = cap.request_policy
    consumes = tuple(
        (
            (driver, spec.pool.name, use.counter_set),
            {n: parse_quantity(c.value) for n, c in use.counters.items()},
        )
        for use in device.consumes_counters
    )
    flat: dict[tuple[str, ...], Any] = {("driver",): driver}
    for kind, table in (("attributes", cel_attributes), ("capacity", cel_capacity)):
        for domain, values in table.items():
            for name, value in values.items():
                flat[(kind, domain, name)] = freeze(value)
    return DeviceInfo(
        id=(driver, spec.pool.name, device.name),
        node=node,
        slice_name=slice_name,
        attributes=attributes,
        versions=frozenset(versions),
        capacity=capacity,
        policies=policies,
        consumes=consumes,
        multiple=bool(device.allow_multiple_allocations),
        taints=tuple(device.taints),
        cel_value={
            "driver": driver,
            "attributes": cel_attributes,
            "capacity": cel_capacity,
            "allowMultipleAllocations": bool(device.allow_multiple_allocations),
        },
        flat=flat,
        node_selector=selector,
        qualified={f"{d}/{n}": v for d, values in attributes.items() for n, v in values.items()},
        short=_short_names(attributes, driver),
    )


def _short_names(attributes: dict[str, dict[str, AttrValue]], driver: str) -> dict[str, AttrValue]:
    short: dict[str, AttrValue] = dict(attributes.get(driver, {}))
    for domain, values in attributes.items():
        if domain != driver:
            for name, value in values.items():
                short.setdefault(name, value)
    return short


def freeze(value: Any) -> Any:
    """A hashable form of a CEL value (maps become sorted tuples of pairs)."""
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    return value
