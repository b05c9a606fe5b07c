"""Node pools on the simulator: nodes made, drained and removed for real in simulation.

A pool node is PROVISIONING for its template's delay (on the clock: a virtual clock makes it
instant to wait), then reported by the inventory like the cluster file's nodes; a drained
node is reported as not ready to take work (``Inventory.unknown``: nothing new is placed
there, its tasks go on). A node is removed only when no task of the journal runs there.
The pool's nodes are kept in ``run_dir/sim/pools.json`` so a restarted server finds them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aipaas.api.devices import ResourceSlice
from aipaas.autoscale.pool_provider import NodeState, NodeTemplate, PoolNode
from aipaas.backends.base import NodeInfo
from aipaas.clock import Clock

POOL_LABEL = "aipaas.dev/pool"


class SimPoolNodes:
    """The pool part of the sim backend (a base of ``SimBackend``)."""

    run_dir: Path
    clock: Clock

    def _init_pool(self) -> None:
        self._pool_file = self.run_dir / "pools.json"
        self._pool: dict[str, dict[str, Any]] = {}
        if self._pool_file.exists():
            self._pool = json.loads(self._pool_file.read_text())
        self._pool_infos: dict[str, tuple[NodeInfo, tuple[ResourceSlice, ...]]] = {}

    # what the backend's inventory and start ask ------------------------------------------

    def pool_inventory(self) -> tuple[list[NodeInfo], list[ResourceSlice], set[str]]:
        """Ready and draining pool nodes, their slices, and the draining ones' names."""
        self._advance()
        nodes: list[NodeInfo] = []
        slices: list[ResourceSlice] = []
        draining: set[str] = set()
        for name, record in sorted(self._pool.items()):
            if record["state"] == NodeState.PROVISIONING:
                continue
            info, published = self._info(name, record)
            nodes.append(info)
            slices.extend(published)
            if record["state"] == NodeState.DRAINING:
                draining.add(name)
        return nodes, slices, draining

    def is_pool_node(self, name: str) -> bool:
        record = self._pool.get(name)
        return record is not None and record["state"] == NodeState.READY

    def _busy_nodes(self) -> set[str]:
        """Nodes where a task runs now (the backend's journal answers)."""
        raise NotImplementedError

    # PoolProvider --------------------------------------------------------------------------

    def list_nodes(self, pool: str) -> list[PoolNode]:
        self._advance()
        return [
            PoolNode(name, NodeState(record["state"]), record["since"])
            for name, record in sorted(self._pool.items())
            if record["template"]["pool"] == pool
        ]

    def create_nodes(self, template: NodeTemplate, count: int) -> list[str]:
        now = self.clock.now().timestamp()
        taken = {
            int(r["index"]) for r in self._pool.values() if r["template"]["pool"] == template.pool
        }
        names = []
        index = 0
        for _ in range(count):
            while index in taken:
                index += 1
            taken.add(index)
            name = f"{template.pool}-{index}"
            self._pool[name] = {
                "index": index,
                "state": NodeState.PROVISIONING,
                "since": now,
                "ready_at": now + template.provisioning_seconds,
                "template": _template_record(template),
            }
            names.append(name)
        self._save_pool()
        return names

    def drain_nodes(self, pool: str, names: Sequence[str]) -> None:
        # a node still provisioning may be drained too: it is removed without ever taking work
        self._set_state(pool, names, NodeState.DRAINING, NodeState.READY, NodeState.PROVISIONING)

    def undrain_nodes(self, pool: str, names: Sequence[str]) -> None:
        self._set_state(pool, names, NodeState.READY, NodeState.DRAINING)

    def delete_nodes(self, pool: str, names: Sequence[str]) -> list[str]:
        busy = self._busy_nodes()
        removed = []
        for name in names:
            record = self._pool.get(name)
            if record is None or record["template"]["pool"] != pool or name in busy:
                continue  # never a node that runs a task
            del self._pool[name]
            self._pool_infos.pop(name, None)
            removed.append(name)
        if removed:
            self._save_pool()
        return removed

    # helpers -------------------------------------------------------------------------------

    def _set_state(self, pool: str, names: Sequence[str], state: str, *before: str) -> None:
        now = self.clock.now().timestamp()
        changed = False
        for name in names:
            record = self._pool.get(name)
            if record and record["template"]["pool"] == pool and record["state"] in before:
                record["state"], record["since"] = state, now
                changed = True
        if changed:
            self._save_pool()

    def _advance(self) -> None:
        """Provisioning nodes whose delay has passed become ready."""
        now = self.clock.now().timestamp()
        changed = False
        for record in self._pool.values():
            if record["state"] == NodeState.PROVISIONING and now >= record["ready_at"]:
                record["state"], record["since"] = NodeState.READY, record["ready_at"]
                changed = True
        if changed:
            self._save_pool()

    def _info(
        self, name: str, record: dict[str, Any]
    ) -> tuple[NodeInfo, tuple[ResourceSlice, ...]]:
        if name not in self._pool_infos:
            template = record["template"]
            info = NodeInfo(
                name=name,
                backend="sim",
                cpu_milli=template["cpu_milli"],
                memory_mib=template["memory_mib"],
                gpu_count=template["gpu_count"],
                gpu_model=template["gpu_model"],
                gpu_memory_mib=template["gpu_memory_mib"],
                labels={
                    "aipaas.dev/backend": "sim",
                    **template["labels"],
                    POOL_LABEL: template["pool"],
                },
            )
            # No ResourceSlices: the GPUs go by count. Reclaim does not yet take devices back
            # from a victim's claims (scheduler/batch), and lent GPUs must be reclaimable.
            slices: tuple[ResourceSlice, ...] = ()
            self._pool_infos[name] = (info, slices)
        return self._pool_infos[name]

    def _save_pool(self) -> None:
        temp = self._pool_file.with_name(self._pool_file.name + ".tmp")
        temp.write_text(json.dumps(self._pool))
        os.replace(temp, self._pool_file)


def _template_record(template: NodeTemplate) -> dict[str, Any]:
    return {
        "pool": template.pool,
        "cpu_milli": template.cpu_milli,
        "memory_mib": template.memory_mib,
        "gpu_count": template.gpu_count,
        "gpu_model": template.gpu_model,
        "gpu_memory_mib": template.gpu_memory_mib,
        "labels": dict(template.labels),
    }
