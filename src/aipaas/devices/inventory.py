"""The device inventory: ResourceSlices turned into per-node device records the allocator reads.

Who calls it: the allocator, the topology helpers, `aipaas allocate`, the scheduler's snapshot.
Pure; imports aipaas.api.devices and aipaas.api.quantity.

A slice's devices become :class:`DeviceInfo` records (attributes normalised to
``domain -> name -> value``; unqualified names belong to the driver's domain). Replacing a slice
builds new records, so the per-device selector results they carry are dropped with them: that is
how the selector cache is invalidated when a slice changes.

Slices are gathered into pools as Kubernetes does: only the slices of a pool's newest
``generation`` count, and a pool's devices are published (allocatable) only when all
``resourceSliceCount`` of its slices are present and no device name repeats in it. An unusable
pool is set aside with its reason in ``unusable_pools``; the other pools are unaffected.
DeviceTaintRules add taints to the devices they select.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from aipaas.api.devices import (
    DeviceTaint,
    DeviceTaintRule,
    ResourceClaim,
    ResourceSlice,
)
from aipaas.api.quantity import parse_quantity
from aipaas.devices.node_selection import node_matches
from aipaas.devices.records import (
    ALL_NODES,
    BY_SELECTOR,
    CounterSetKey,
    DeviceId,
    DeviceInfo,
    device_record,
    freeze,
    qualify,
    slice_name,
)

__all__ = [
    "ALL_NODES",
    "BY_SELECTOR",
    "CounterSetKey",
    "DeviceId",
    "DeviceInfo",
    "InUse",
    "Inventory",
    "InventoryError",
    "PoolKey",
    "freeze",
    "hold",
    "node_matches",
    "qualify",
    "release",
    "rule_selects",
]

PoolKey = tuple[str, str]
"""(driver, pool name)."""


class InventoryError(ValueError):
    """Input that cannot be read (unknown counter sets, an allocation of an unknown device)."""


@dataclass(slots=True)
class InUse:
    """What existing allocations hold: whole devices, counters and shared capacity."""

    devices: set[DeviceId] = field(default_factory=set)
    counters: dict[CounterSetKey, dict[str, Decimal]] = field(default_factory=dict)
    capacity: dict[DeviceId, dict[str, Decimal]] = field(default_factory=dict)
    shares: dict[DeviceId, int] = field(default_factory=dict)
    holders: dict[DeviceId, list[str]] = field(default_factory=dict)
    #: node (or ALL_NODES, BY_SELECTOR, COUNTERS) -> a stamp, new with each hold or release
    #: there: a node's ``stamp`` names the state of what it can allocate, so an answer
    #: computed for it stands while the stamp is the same (devices/ledger.py caches on it)
    versions: dict[str, int] = field(default_factory=dict)
    #: the ``versions`` keys in the order their stamps changed: what changed since a moment
    #: is what was appended since (devices/ledger.py brings its per-shape answers up to date
    #: from it, node by node, instead of asking every node again)
    touched: list[str] = field(default_factory=list)

    def copy(self) -> InUse:
        return InUse(
            set(self.devices),
            {k: dict(v) for k, v in self.counters.items()},
            {k: dict(v) for k, v in self.capacity.items()},
            dict(self.shares),
            {k: list(v) for k, v in self.holders.items()},
            dict(self.versions),
            list(self.touched),
        )

    def stamp(self, node: str) -> tuple[int, int, int, int]:
        """What ``node`` can allocate depends on: its own devices, those every node or a
        selector reaches, and the shared counters."""
        got = self.versions.get
        return (got(node, 0), got(ALL_NODES, 0), got(BY_SELECTOR, 0), got(COUNTERS, 0))

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
        taint_rules: Iterable[DeviceTaintRule] = (),
    ) -> None:
        self.node_labels: dict[str, Mapping[str, str]] = dict(node_labels or {})
        self._slices: dict[str, ResourceSlice] = {}
        self._devices_by_slice: dict[str, list[DeviceInfo]] = {}
        self._pool_slices: dict[PoolKey, list[str]] = {}
        self._published: dict[PoolKey, list[DeviceInfo]] = {}
        self._taint_rules: list[DeviceTaintRule] = list(taint_rules)
        self.unusable_pools: dict[PoolKey, str] = {}
        """(driver, pool) -> why none of its devices is allocatable (incomplete, duplicate)."""
        self.by_node: dict[str, list[DeviceInfo]] = {}
        self.by_id: dict[DeviceId, DeviceInfo] = {}
        self.shareable: dict[str, int] = {}
        """Node key -> how many of its published devices allow multiple allocations."""
        self.counter_sets: dict[CounterSetKey, dict[str, Decimal]] = {}
        self._counter_owner: dict[CounterSetKey, str] = {}
        self.generation = 0
        """Counts the changes of what may be allocated (a slice put or removed, the taint
        rules set): a scheduler that skips unchanged cycles reads it."""
        self.candidates: dict[tuple[tuple[object, ...], str], list[DeviceInfo]] = {}
        """(an alternative's ``static_key``, node) -> the node's devices it selects, before
        what is held (requests.py ``static_candidates``): the same for every pod of one shape,
        so filtering pods against every node reads it; emptied with each change above."""
        self.consumed: dict[tuple[tuple[object, ...], DeviceId], dict[str, Decimal] | None] = {}
        """(``static_key``, device) -> what one share of the device takes for such a request
        (requests.py ``consumed_capacity``; None: it cannot): a static answer, kept alike."""
        for item in slices:
            self.put_slice(item)

    # -- slices -----------------------------------------------------------------------------

    def put_slice(self, item: ResourceSlice) -> None:
        """Add or replace a slice (by metadata.name); its devices get fresh caches.

        The slice's pool is then published again: its devices are allocatable only while the
        pool is usable (see :meth:`_publish_pool`).
        """
        name = slice_name(item)
        self.generation += 1
        self.candidates.clear()
        self.consumed.clear()
        if name in self._slices:
            self.remove_slice(name)
        records = [device_record(item, name, index) for index in range(len(item.spec.devices))]
        for record in records:
            record.taints = self._taints_for(record)
        pool = (item.spec.driver, item.spec.pool.name)
        self._slices[name] = item
        self._devices_by_slice[name] = records
        self._pool_slices.setdefault(pool, []).append(name)
        self._publish_pool(pool)

    def remove_slice(self, name: str) -> None:
        """Forget a slice, its devices (and their cached answers) and its counter sets.

        Raises:
            KeyError: no slice of that name.
        """
        item = self._slices.pop(name)
        self.generation += 1
        self.candidates.clear()
        self.consumed.clear()
        del self._devices_by_slice[name]
        pool = (item.spec.driver, item.spec.pool.name)
        self._pool_slices[pool].remove(name)
        if not self._pool_slices[pool]:
            del self._pool_slices[pool]
        self._publish_pool(pool)

    def _publish_pool(self, pool: PoolKey) -> None:
        """Make a pool's devices allocatable, or none of them, as Kubernetes gathers pools.

        Only the slices of the pool's newest ``generation`` count (older ones are obsolete);
        the pool is usable when exactly ``resourceSliceCount`` of them are present and no
        device name or counter set name repeats among them. An unusable pool publishes no
        device (its reason is in ``unusable_pools``); other pools are not affected.
        """
        for record in self._published.pop(pool, []):
            if record.multiple:
                self.shareable[record.node] -= 1
                if not self.shareable[record.node]:
                    del self.shareable[record.node]
            del self.by_id[record.id]
            self.by_node[record.node].remove(record)
            if not self.by_node[record.node]:
                del self.by_node[record.node]
        for key in [k for k in self.counter_sets if (k[0], k[1]) == pool]:
            del self.counter_sets[key]
            del self._counter_owner[key]
        self.unusable_pools.pop(pool, None)
        names = self._pool_slices.get(pool)
        if not names:
            return
        newest = max(self._slices[n].spec.pool.generation for n in names)
        current = [n for n in names if self._slices[n].spec.pool.generation == newest]
        reason = _pool_problem([self._slices[n] for n in current], self._devices_by_slice, current)
        if reason is not None:
            self.unusable_pools[pool] = reason
            return
        records: list[DeviceInfo] = []
        for name in current:
            for counter_set in self._slices[name].spec.shared_counters:
                key = (pool[0], pool[1], counter_set.name)
                self.counter_sets[key] = {
                    n: parse_quantity(c.value) for n, c in counter_set.counters.items()
                }
                self._counter_owner[key] = name
            for record in self._devices_by_slice[name]:
                if record.multiple:
                    self.shareable[record.node] = self.shareable.get(record.node, 0) + 1
                self.by_id[record.id] = record
                self.by_node.setdefault(record.node, []).append(record)
                records.append(record)
        self._published[pool] = records

    # -- device taint rules -----------------------------------------------------------------

    def set_taint_rules(self, rules: Iterable[DeviceTaintRule]) -> None:
        """Taint the devices the rules select, besides the taints their slices publish."""
        self._taint_rules = list(rules)
        self.generation += 1
        self.candidates.clear()
        self.consumed.clear()
        for records in self._devices_by_slice.values():
            for record in records:
                record.taints = self._taints_for(record)

    def _taints_for(self, record: DeviceInfo) -> tuple[DeviceTaint, ...]:
        added = tuple(
            rule.spec.taint for rule in self._taint_rules if rule_selects(rule, record.id)
        )
        return record.own_taints + added if added else record.own_taints

    def pool_problem(self, slice_name: str) -> str | None:
        """Why the pool of a slice (of its newest generation) allocates nothing, or None."""
        item = self._slices.get(slice_name)
        if item is None:
            return None
        return self.unusable_pools.get((item.spec.driver, item.spec.pool.name))

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
                record = self.by_id.get(device_id) or self._unpublished(device_id)
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

    def _unpublished(self, device_id: DeviceId) -> DeviceInfo | None:
        """A device of an unusable pool: still held by the allocations that name it."""
        for name in self._pool_slices.get((device_id[0], device_id[1]), ()):
            for record in self._devices_by_slice[name]:
                if record.id == device_id:
                    return record
        return None


def rule_selects(rule: DeviceTaintRule, device_id: DeviceId) -> bool:
    """A DeviceTaintRule's selector: unset selects nothing; each field set must equal."""
    selector = rule.spec.device_selector
    if selector is None:
        return False
    driver, pool, name = device_id
    return (
        (selector.driver is None or selector.driver == driver)
        and (selector.pool is None or selector.pool == pool)
        and (selector.device is None or selector.device == name)
    )


#: the ``InUse.versions`` key of any change of a shared counter set
COUNTERS = "\0counters"
# Stamps are unique across every InUse (a copy keeps its own): a stamp names one state of a
# node, so a copy put back in use never meets an answer computed for a later state.
_STAMPS = itertools.count(1)


def _touch(state: InUse, record: DeviceInfo) -> None:
    stamp = next(_STAMPS)
    state.versions[record.node] = stamp
    state.touched.append(record.node)
    if record.consumes:
        state.versions[COUNTERS] = stamp
        state.touched.append(COUNTERS)


def hold(state: InUse, record: DeviceInfo, consumed: Mapping[str, Decimal] | None) -> None:
    """Mark a device as held: whole (consumed None) or a share of its capacity.

    A shared device consumes its counters once, with its first share.
    """
    _touch(state, record)
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
    _touch(state, record)
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


def _pool_problem(
    slices: list[ResourceSlice], records: Mapping[str, list[DeviceInfo]], names: list[str]
) -> str | None:
    """Why the current slices of one pool cannot be allocated from, or None."""
    devices: set[str] = set()
    counter_sets: set[str] = set()
    for item, name in zip(slices, names, strict=True):
        for record in records[name]:
            if record.name in devices:
                return f"device {record.name!r} is published twice"
            devices.add(record.name)
        for counter_set in item.spec.shared_counters:
            if counter_set.name in counter_sets:
                return f"counter set {counter_set.name!r} is published twice"
            counter_sets.add(counter_set.name)
    wanted = slices[0].spec.pool.resource_slice_count
    if len(slices) != wanted:
        return f"incomplete: {len(slices)} of {wanted} ResourceSlices of the pool are published"
    return None
