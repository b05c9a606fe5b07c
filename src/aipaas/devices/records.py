"""Device records: a ResourceSlice's devices in the form the allocator reads them.

Who calls it: the inventory (``device_record`` per device of a slice it indexes), and through
the inventory's re-exports the allocator, the search, the topology helpers and the ledger.
Pure; imports aipaas.api.devices, aipaas.api.quantity and aipaas.devices.cel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from aipaas.api.devices import CapacityRequestPolicy, DeviceTaint, ResourceSlice
from aipaas.api.quantity import parse_quantity
from aipaas.devices.cel import make_quantity, make_semver

__all__ = [
    "ALL_NODES",
    "BY_SELECTOR",
    "AttrValue",
    "CounterSetKey",
    "DeviceId",
    "DeviceInfo",
    "device_record",
    "freeze",
    "qualify",
    "slice_name",
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
    own_taints: tuple[DeviceTaint, ...]
    """The taints its slice publishes."""
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
    taints: tuple[DeviceTaint, ...] = ()
    """Its own taints and those of the DeviceTaintRules that select it."""
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()

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


def slice_name(item: ResourceSlice) -> str:
    if item.metadata.name:
        return item.metadata.name
    node = item.spec.node_name or "all"
    return f"{node}-{item.spec.driver}-{item.spec.pool.name}"


def device_record(item: ResourceSlice, slice_name: str, index: int) -> DeviceInfo:
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
        own_taints=tuple(device.taints),
        taints=tuple(device.taints),
        binding_conditions=tuple(device.binding_conditions),
        binding_failure_conditions=tuple(device.binding_failure_conditions),
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
