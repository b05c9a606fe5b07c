"""Dataset caches on a cluster's nodes (Slurm, Ray): the ``DatasetCaches`` capability they share.

Each node has its own cache (data/cache.py) under ``<root>/<node name>``: on a real cluster the
root is a node-local disk mounted at the same path on every node (each node uses only its own
directory) and also readable by the server (which reports entries and writes a load's request
there); on the single-host test clusters it is one directory with a subdirectory per node.

A task with datasets runs on its node as ``bash -c STAGE PYTHON DIR``: data/stage.py fills the
node's cache from DIR/stage.json (the source and its credentials, mode 0600, removed once read),
takes a lease, links ``DIR/<mountPath>`` to the entry's read-only data, then becomes
backends/node_runner.py, which runs the command with the job's own environment; the wrapper
exits with the command's code. The variables say where each dataset is
(``AIPAAS_DATASET_<NAME>_PATH``, ``AIPAAS_DATASETS``, as on the local backend). Background
loads (prefetch, ``aipaas dataset warm``) run data/copier.py on the node, started by each
backend its own way (a Slurm job, a Ray task): ``_start_load``.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aipaas.backends import node_runner
from aipaas.backends.base import Inventory, LaunchRequest
from aipaas.backends.datasets import CACHE_ANNOTATION, CACHE_STATE_SECONDS, CachedDataset, env_name
from aipaas.data.cache import NodeCache
from aipaas.data.entry import LOAD, Entry
from aipaas.data.stage import STAGE_FILE

DEFAULT_CAPACITY = 100 << 30
NODE_RUNNER = str(Path(node_runner.__file__).resolve())
LAUNCH_FILE = "launch.json"
#: the stage, then the command's exit code (written by the runner, or by the stage when the
#: data could not be had; a task with outputs has its code written after the upload)
STAGE_SCRIPT = (
    '"$1" -I -m aipaas.data.stage "$2"; code=$?; '
    'if [ -f "$2/exit" ]; then code=$(cat "$2/exit"); fi; exit "$code"'
)


@dataclass(frozen=True)
class NodeCachesConfig:
    root: Path | None = None  # None: beside the backend's run directory (<run dir>-datasets)
    capacity_bytes: int = DEFAULT_CAPACITY
    #: where file:// datasets may be read from (nowhere unless a platform admin says)
    file_roots: tuple[str, ...] = field(default_factory=tuple)


def configure_node_caches(backend: object, config: NodeCachesConfig) -> None:
    """The settings' caches for every cluster backend in ``backend`` (itself, the one its
    fencing wraps, or its members side by side)."""
    if isinstance(backend, NodeDatasetCaches):
        backend.dataset_caches_config = config
        return
    inner = getattr(backend, "inner", None)
    if inner is not None:
        configure_node_caches(inner, config)
    members = getattr(backend, "backends", None)
    if isinstance(members, tuple | list):
        for member in members:
            configure_node_caches(member, config)


def _node_dir(node: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", node):
        raise ValueError(f"node name {node!r} cannot name a cache directory")
    return node


class NodeDatasetCaches:
    """Mixed into a cluster backend; ``run_dir`` is the backend's, ``_start_load`` its own."""

    run_dir: Path
    dataset_caches_config: NodeCachesConfig = NodeCachesConfig()

    # the DatasetCaches capability ---------------------------------------------------------

    def node_cache(self, node: str) -> NodeCache:
        config = self.dataset_caches_config
        root = config.root or self.run_dir.with_name(self.run_dir.name + "-datasets")
        return NodeCache(root.resolve() / _node_dir(node), config.capacity_bytes)

    def cached_datasets(self) -> list[CachedDataset]:
        return [
            CachedDataset(node=node, **vars(state))
            for node in sorted(self._cache_nodes())
            for state in self.node_cache(node).states()
        ]

    def cache_capacity(self, node: str) -> int | None:
        if node not in self._cache_nodes():
            return None
        return self.dataset_caches_config.capacity_bytes

    def load_dataset(self, node: str, key: str, source: Mapping[str, Any]) -> bool:
        if node not in self._cache_nodes():
            return False
        cache = self.node_cache(node)
        entry = cache.entry(key)
        entry.path.mkdir(parents=True, exist_ok=True)
        if entry.is_locked() or (entry.path / LOAD).exists():
            return False  # a load or a task's staging fills it now, or one waits to start
        load = {"source": self.with_file_roots(source), "capacity": cache.capacity_bytes}
        entry.write_json(LOAD, load, private=True)
        try:
            self._start_load(node, entry)
        except Exception:
            (entry.path / LOAD).unlink(missing_ok=True)
            raise
        return True

    def evict_dataset(self, node: str, key: str) -> bool:
        return node in self._cache_nodes() and self.node_cache(node).evict(key)

    def cancel_load(self, node: str, key: str) -> bool:
        """Withdraw a background load (its dataset is gone): data/cache.py cancel_load."""
        return node in self._cache_nodes() and self.node_cache(node).cancel_load(key)

    def set_cache_hints(self, node: str, pinned: Sequence[str], demand: Mapping[str, int]) -> None:
        if node in self._cache_nodes():
            cache = self.node_cache(node)
            cache.root.mkdir(parents=True, exist_ok=True)
            cache.set_hints(list(pinned), demand)

    def _start_load(self, node: str, entry: Entry) -> None:
        """Run ``python -m aipaas.data.copier ENTRY`` on the node (it reads ENTRY/load.json)."""
        raise NotImplementedError

    # the inventory ------------------------------------------------------------------------

    def _cache_nodes(self) -> set[str]:
        nodes: set[str] | None = getattr(self, "_dataset_nodes", None)
        return nodes if nodes is not None else set()

    def with_cache_states(self, inventory: Inventory) -> Inventory:
        """The nodes with their cache's totals as an annotation (capacity, bytes held,
        entries, complete entries; which datasets: only in each tenant's Dataset status),
        read again at most every CACHE_STATE_SECONDS. Also the nodes that have a cache."""
        self._dataset_nodes = {n.name for n in inventory.nodes}
        now = time.monotonic()
        last: tuple[float, dict[str, str]] | None = getattr(self, "_cache_summaries", None)
        if last is None or now - last[0] >= CACHE_STATE_SECONDS:
            last = (now, {n.name: self._summary(n.name) for n in inventory.nodes})
            self._cache_summaries = last
        nodes = tuple(
            replace(n, annotations={**n.annotations, CACHE_ANNOTATION: last[1][n.name]})
            if n.name in last[1]
            else n
            for n in inventory.nodes
        )
        return replace(inventory, nodes=nodes)

    def _summary(self, node: str) -> str:
        cache = self.node_cache(node)
        try:
            states = cache.states()
        except OSError:
            states = []
        summary = {
            "capacityBytes": cache.capacity_bytes,
            "usedBytes": sum(s.bytes for s in states),
            "entries": len(states),
            "complete": sum(1 for s in states if s.complete),
        }
        return json.dumps(summary, sort_keys=True, separators=(",", ":"))

    # staging a task -----------------------------------------------------------------------

    def staged(
        self, request: LaunchRequest, directory: Path, cwd: str | None
    ) -> tuple[LaunchRequest, dict[str, str]]:
        """The request as its node runs it (the stage, then its command) and the files to
        write in ``directory`` on the node first (stage.json: private); a request without
        datasets or outputs is returned as it is, with no files."""
        if not (request.datasets or request.outputs):
            return request, {}
        cache = self.node_cache(request.node)
        env = dict(request.env)
        items = []
        for mount in request.datasets:
            link = directory / mount.mount_path.lstrip("/")
            env[env_name(mount.name)] = str(link)
            items.append(
                {
                    "name": mount.name,
                    "key": mount.key,
                    "link": str(link),
                    "source": self.with_file_roots(mount.source),
                    "stream": mount.stream,
                    "variable": env_name(mount.name),
                }
            )
        if request.datasets:
            env["AIPAAS_DATASETS"] = ",".join(m.name for m in request.datasets)
        outputs = []
        for index, output in enumerate(request.outputs):
            path = directory / output.path.lstrip("/")
            env[f"AIPAAS_OUTPUT_{index}_PATH"] = str(path)
            if index == 0:
                env["AIPAAS_OUTPUT_PATH"] = str(path)
            destination = self.with_file_roots(output.destination)
            outputs.append({"path": str(path), "destination": destination, "always": output.always})
        stage = {
            "cache_root": str(cache.root),
            "capacity": cache.capacity_bytes,
            "datasets": items,
            "outputs": outputs,
            "runner": NODE_RUNNER,
            "uid": None,
            "gid": None,
        }
        launch = {"command": list(request.command), "cwd": cwd}
        files = {
            str(directory / STAGE_FILE): json.dumps(stage),
            str(directory / LAUNCH_FILE): json.dumps(launch),
        }
        command = ("/bin/bash", "-c", STAGE_SCRIPT, "aipaas-stage", sys.executable, str(directory))
        return replace(request, command=command, env=env), files

    def with_file_roots(self, source: Mapping[str, Any]) -> dict[str, Any]:
        """The node decides where file:// sources may lie, not the request."""
        return {**source, "file_roots": list(self.dataset_caches_config.file_roots)}
