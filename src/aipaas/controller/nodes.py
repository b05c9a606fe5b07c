"""Step 1 of a controller cycle, and node status at its end: what the backend reports as nodes
and ResourceSlices becomes stored Node and ResourceSlice objects; each Node's status says
whether it is ready and what is allocated on it.

An inventory that cannot be read (the backend raises, or answers for part of itself) is not
an empty cluster: the last known nodes stay, marked unknown (not ready): nothing new is placed
on them and their tasks are not given up. A node is gone only when a complete inventory no
longer reports it.

Who calls it: controller/cycle.py (``refresh`` first in a cycle, ``write_status`` after the
write-back). It asks the backend only for its inventory, at most every ``inventory_seconds``
(the controller's own timer: monotonic).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aipaas.api.devices import ResourceClaim, ResourceSlice
from aipaas.api.dra import wrap_device
from aipaas.api.meta import Object, ObjectMeta
from aipaas.api.node import Node, NodeGpus, NodeSpec, NodeStatus
from aipaas.backends.base import Backend, NodeInfo
from aipaas.clock import Clock
from aipaas.controller.placement import Placer
from aipaas.store import Store

log = logging.getLogger("aipaas.controller")

PUBLISHED_LABEL = "aipaas.dev/published-by"


class NodeInventory:
    """The backend's nodes and slices as last reported, and the Node objects and statuses
    last written (so a status is written only when it changes)."""

    def __init__(
        self, store: Store, backend: Backend, clock: Clock, inventory_seconds: float
    ) -> None:
        self.store = store
        self.backend = backend
        self.clock = clock
        self.inventory_seconds = inventory_seconds
        self.nodes: list[NodeInfo] = []  # last known, ready or not
        #: last known nodes whose state is unknown now (not ready: nothing new goes there)
        self.unknown: set[str] = set()
        #: the last read reported everything: a node it lacks is gone (not merely unknown)
        self.complete = False
        self._names: set[str] = set()
        self.slices: list[ResourceSlice] = []
        #: allocations others made on these devices, as last reported (``Inventory``)
        self.held_elsewhere: tuple[ResourceClaim, ...] = ()
        #: the conditions device drivers set (binding conditions), as last reported
        self.device_conditions: Mapping[tuple[str, str, str], tuple[Mapping[str, Any], ...]] = {}
        self._node_objects: dict[str, Object] = {}
        self._node_status: dict[str, NodeStatus] = {}
        self._inventory_at: float | None = None
        self._published: tuple[object, object] | None = None  # the nodes and slices last written
        #: each node and slice as this process last published it (by name): one that the
        #: backend reports again unchanged is not read from the store again (hundreds of nodes
        #: and slices, re-read every ``inventory_seconds``, when only a few change)
        self._info_written: dict[str, NodeInfo] = {}
        self._slice_written: dict[str, ResourceSlice] = {}
        #: the names last published (and, for slices, whether that read was complete): stored
        #: objects the backend no longer reports are looked for only when these change
        self._names_written: frozenset[str] | None = None
        self._slice_names_written: tuple[frozenset[str], bool] | None = None
        self._stored_name: dict[str, str] = {}  # a slice's name -> its stored object's
        #: changes whenever what the last read left (nodes, slices, unknown, complete) changes:
        #: a placement kept from an earlier cycle is valid only while it holds (quiet.py)
        self.version = 0
        self._status_of: tuple[Placer, int] | None = None  # the placement statuses were written of
        self._by_name: tuple[list[NodeInfo], dict[str, NodeInfo], dict[str, str]] = ([], {}, {})

    @property
    def by_name(self) -> Mapping[str, NodeInfo]:
        """The last known nodes by name (made again only when the list is another: each
        start looks its nodes up, hundreds of times a cycle)."""
        return self._indexed()[1]

    @property
    def backends(self) -> Mapping[str, str]:
        """Each last known node's backend, by node name."""
        return self._indexed()[2]

    def _indexed(self) -> tuple[list[NodeInfo], dict[str, NodeInfo], dict[str, str]]:
        if self._by_name[0] is not self.nodes:
            nodes = self.nodes
            self._by_name = (nodes, {n.name: n for n in nodes}, {n.name: n.backend for n in nodes})
        return self._by_name

    def refresh(self) -> None:
        now = self.clock.monotonic()
        if self._inventory_at is not None and now - self._inventory_at < self.inventory_seconds:
            return
        self._inventory_at = now
        try:
            inventory = self.backend.inventory()
        except Exception as err:  # unknown, not empty: keep what was known, not ready
            log.warning("inventory failed, %d nodes unknown: %s", len(self.nodes), err)
            self.unknown = {n.name for n in self.nodes}
            self.complete = False
            self.version += 1
            return
        if (
            set(inventory.unknown) != self.unknown
            or inventory.complete != self.complete
            or (inventory.nodes, inventory.slices) != (tuple(self.nodes), tuple(self.slices))
            or inventory.held_elsewhere != self.held_elsewhere
        ):
            self.version += 1
        self.held_elsewhere = inventory.held_elsewhere
        self.unknown = set(inventory.unknown)
        self.complete = inventory.complete
        self.device_conditions = inventory.device_conditions
        self.nodes = list(inventory.nodes)
        self._names = {n.name for n in self.nodes}
        self.slices = list(inventory.slices)
        published = (inventory.nodes, inventory.slices)
        if published == self._published:
            return  # what this process last published (compared by identity first: cheap)
        self._published = published
        self._publish_slices()
        for info in self.nodes:
            if self._info_written.get(info.name) == info and info.name in self._node_objects:
                continue
            wanted = Node(
                metadata=ObjectMeta(
                    name=info.name,
                    labels=dict(info.labels),
                    annotations=dict(info.annotations),  # what the backend says (isolation, GPUs)
                ),
                spec=NodeSpec(
                    backend=info.backend,
                    cpu=f"{info.cpu_milli}m"
                    if info.cpu_milli % 1000
                    else str(info.cpu_milli // 1000),
                    memory=f"{info.memory_mib}Mi",
                    gpus=NodeGpus(
                        count=info.gpu_count,
                        model=info.gpu_model,
                        memory=f"{info.gpu_memory_mib}Mi" if info.gpu_memory_mib else None,
                    ),
                ),
            )
            current = self.store.find("Node", "", info.name)
            if current is None:
                current = self.store.create(wanted)
                self.store.record_event(
                    current, "Registered", f"reported by backend {info.backend}"
                )
            elif (
                current.to_wire().get("spec") != wanted.to_wire().get("spec")
                or current.metadata.annotations != wanted.metadata.annotations
            ):
                current = self.store.update(wanted)
            self._node_objects[info.name] = current
            self._info_written[info.name] = info
        reported = frozenset(info.name for info in self.nodes)
        if reported == self._names_written:
            return
        self._names_written = reported
        for node in self.store.list_objects("Node", ""):
            if node.name not in reported:
                self._node_objects[node.name] = node  # gone from the backend: not ready

    @property
    def ready(self) -> list[NodeInfo]:
        """The nodes new work may go to: reported by the last read, state known."""
        return [n for n in self.nodes if n.name not in self.unknown]

    def is_ready(self, name: str) -> bool:
        return name not in self.unknown and name in self._names

    def is_gone(self, name: str) -> bool:
        """A complete read did not report it: its tasks can be given up (and stopped)."""
        return self.complete and name not in self._names

    def write_status(self, placer: Placer) -> None:
        """Node status: ready while reported; what is allocated (written when it changes)."""
        if self._status_of == (placer, self.version):
            return  # a placement kept from the last cycle (quiet.py): the same statuses
        allocated = placer.allocated()
        changes = []
        for name, node in self._node_objects.items():
            cpu, memory, gpus = allocated.get(name, (0, 0, 0.0))
            status = NodeStatus(
                ready=name in allocated,
                allocated_cpu=f"{cpu}m",
                allocated_memory=f"{memory}Mi",
                allocated_gpus=gpus,
            )
            if self._node_status.get(name) != status:
                changes.append((node, status))
                self._node_status[name] = status
        if changes:
            with self.store.transaction() as tx:
                self.store.write_statuses(changes, conn=tx)
        self._status_of = (placer, self.version)

    def _publish_slices(self) -> None:
        """The backend's ResourceSlices as stored objects (created, updated, or deleted when the
        backend no longer reports them); slices applied by an admin are left alone."""
        reported = set()
        for item in self.slices:
            known = self._slice_written.get(item.metadata.name or "")
            if known == item:
                reported.add(self._stored_name[item.metadata.name or ""])
                continue
            wanted = wrap_device(item)
            meta = wanted.metadata.model_copy(
                update={"labels": {**wanted.metadata.labels, PUBLISHED_LABEL: "backend"}}
            )
            wanted = wanted.model_copy(update={"metadata": meta})
            reported.add(wanted.name)
            current = self.store.find("ResourceSlice", "", wanted.name)
            if current is None:
                self.store.create(wanted)
            elif current.to_wire().get("spec") != wanted.to_wire().get("spec"):
                self.store.update(wanted)
            self._slice_written[item.metadata.name or ""] = item
            self._stored_name[item.metadata.name or ""] = wanted.name
        names = (frozenset(reported), self.complete)
        if names == self._slice_names_written:
            return
        self._slice_names_written = names
        for stored in self.store.list_objects("ResourceSlice", ""):
            # Only a complete inventory tells a slice is gone (not a member that failed).
            if (
                self.complete
                and stored.metadata.labels.get(PUBLISHED_LABEL)
                and stored.name not in reported
            ):
                self.store.delete("ResourceSlice", "", stored.name)
