"""Node pools on Slurm through its power saving: a pool is the slurm.conf nodes whose features
include the pool's name; they sit powered down until aipaas asks for them.

Slurm does the machine work itself: ``scontrol update NodeName=... State=POWER_UP`` makes
slurmctld run the site's ResumeProgram (boot the machine, start slurmd) and
``State=POWER_DOWN`` its SuspendProgram; the site's slurm.conf names both, with SuspendTime,
ResumeTimeout and the nodes' ``State=CLOUD`` or ``Features``. aipaas only decides when.

A drain (cordon) is aipaas's own, kept in ``run_dir/pool-drained.json``: the backend reports a
drained node as not taking work (``Inventory.unknown``), so nothing new lands there and its
tasks go on. Not Slurm's DRAIN: a drained Slurm node leaves the inventory, and its tasks would
be taken for lost. A node is powered down only when Slurm says nothing is allocated on it.
The node shape of the pool's template is what slurm.conf says, not what aipaas asks: Slurm's
nodes are declared up front, so ``create_nodes`` powers up nodes that already exist.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aipaas.autoscale.pool_provider import NodeState, NodeTemplate, PoolNode
from aipaas.backends.slurm.commands import SlurmCommands
from aipaas.backends.slurm.inventory import _words

#: flags of a node that is off (or going off): not part of the pool until powered up again
OFF_FLAGS = frozenset({"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"})
#: flags of a node on its way up
UP_FLAGS = frozenset({"POWERING_UP", "POWER_UP"})
#: base states with work on the node
BUSY_STATES = frozenset({"allocated", "mixed", "completing"})
DRAINED_FILE = "pool-drained.json"


def node_flags(item: dict[str, Any]) -> tuple[str, set[str]]:
    """(base state in lower case, upper-case flags) of a ``sinfo --json`` node."""
    states = _words(item.get("state"))
    base = states[0].lower() if states else "unknown"
    flags = {f.upper() for f in _words(item.get("state_flags"))} | {s.upper() for s in states[1:]}
    return base, flags


def features_of(item: dict[str, Any]) -> set[str]:
    text = str(item.get("active_features") or item.get("features") or "")
    return {f for f in text.split(",") if f}


class SlurmPowerPool:
    """The pool part of the Slurm backend (a base of ``SlurmBackend``)."""

    commands: SlurmCommands
    run_dir: Path

    def _drained(self) -> dict[str, float]:
        path = self.run_dir / DRAINED_FILE
        if not path.exists():
            return {}
        found = json.loads(path.read_text())
        return {str(k): float(v) for k, v in found.items()}

    def _save_drained(self, drained: dict[str, float]) -> None:
        path = self.run_dir / DRAINED_FILE
        temp = path.with_name(path.name + ".tmp")
        temp.write_text(json.dumps(drained))
        os.replace(temp, path)

    def drained_pool_nodes(self) -> frozenset[str]:
        """Nodes the inventory reports as taking no work."""
        return frozenset(self._drained())

    def _pool_items(self, pool: str) -> list[dict[str, Any]]:
        return [item for item in self.commands.nodes() if pool in features_of(item)]

    # PoolProvider --------------------------------------------------------------------------

    def list_nodes(self, pool: str) -> list[PoolNode]:
        drained = self._drained()
        nodes = []
        for item in self._pool_items(pool):
            name = str(item["name"])
            base, flags = node_flags(item)
            if flags & UP_FLAGS:
                state = NodeState.PROVISIONING
            elif flags & OFF_FLAGS:
                continue  # off: not part of the pool now
            elif name in drained:
                nodes.append(PoolNode(name, NodeState.DRAINING, drained[name]))
                continue
            elif base in ("down", "unknown", "future"):
                state = NodeState.PROVISIONING  # slurmd not registered yet
            else:
                state = NodeState.READY
            nodes.append(PoolNode(name, state, self._since(name, state)))
        return nodes

    def _since(self, name: str, state: NodeState) -> float:
        """When this process first saw the node in its state (Slurm does not say)."""
        seen: dict[str, tuple[NodeState, float]] = self.__dict__.setdefault("_pool_seen", {})
        if name not in seen or seen[name][0] != state:
            seen[name] = (state, time.time())
        return seen[name][1]

    def create_nodes(self, template: NodeTemplate, count: int) -> list[str]:
        """Power up ``count`` of the pool's powered-down nodes (fewer if fewer are off)."""
        off = []
        for item in self._pool_items(template.pool):
            _, flags = node_flags(item)
            if flags & OFF_FLAGS and not flags & UP_FLAGS:
                off.append(str(item["name"]))
        chosen = sorted(off)[:count]
        if chosen:
            self._scontrol(chosen, "POWER_UP")
            self._forget_drained(chosen)
        return chosen

    def drain_nodes(self, pool: str, names: Sequence[str]) -> None:
        drained = self._drained()
        now = time.time()
        for name in names:
            drained.setdefault(name, now)
        self._save_drained(drained)

    def undrain_nodes(self, pool: str, names: Sequence[str]) -> None:
        self._forget_drained(names)

    def delete_nodes(self, pool: str, names: Sequence[str]) -> list[str]:
        """Power down the named drained nodes on which Slurm has nothing allocated."""
        wanted = set(names) & set(self._drained())
        empty = []
        for item in self._pool_items(pool):
            name = str(item["name"])
            base, flags = node_flags(item)
            if name in wanted and base not in BUSY_STATES and not flags & OFF_FLAGS:
                empty.append(name)
        if empty:
            self._scontrol(sorted(empty), "POWER_DOWN")
            self._forget_drained(empty)
        return sorted(empty)

    def _scontrol(self, names: Sequence[str], state: str) -> None:
        self.commands.run(["scontrol", "update", f"NodeName={','.join(names)}", f"State={state}"])

    def _forget_drained(self, names: Sequence[str]) -> None:
        drained = self._drained()
        if any(name in drained for name in names):
            for name in names:
                drained.pop(name, None)
            self._save_drained(drained)
