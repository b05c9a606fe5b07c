"""The driver's part of the Ray dataset caches: a background load (prefetch, ``aipaas dataset
warm``) is a Ray task pinned to the node (``soft=False``, no CPU: Ray accounts none to it)
that runs the copier on the entry, which reads the load's request from ENTRY/load.json. Ray
runs it once (no retries: a load killed mid-copy is resumed by the next one)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from aipaas.backends.ray.inventory import RayNode


def run_copier(python: str, entry: str) -> int:
    """On the node: the copier, to its end (its lock says the entry is loading)."""
    done = subprocess.run([python, "-I", "-m", "aipaas.data.copier", entry], check=False)
    return done.returncode


class RayNodeLoads:
    """Mixed into RayDriver: ``_nodes`` and ``inventory`` are the driver's."""

    _nodes: dict[str, RayNode]
    _loads: list[Any]

    def inventory(self) -> Any:
        raise NotImplementedError

    def load_on_node(self, node: str, entry: str) -> None:
        if node not in self._nodes:
            self.inventory()
        found = self._nodes.get(node)
        if found is None:
            raise ValueError(f"the Ray cluster has no live node {node}")
        copier = ray.remote(run_copier).options(
            num_cpus=0,
            max_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(found.node_id, soft=False),
        )
        loads = [ref for ref in getattr(self, "_loads", []) if not _done(ref)]
        loads.append(copier.remote(sys.executable, entry))
        self._loads = loads  # kept until done: a load is not given up with its reference


def _done(ref: Any) -> bool:
    ready, _ = ray.wait([ref], timeout=0)
    return bool(ready)
