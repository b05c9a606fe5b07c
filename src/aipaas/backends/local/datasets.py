"""The local backend's dataset cache (the ``DatasetCaches`` capability, backends/datasets.py).

The cache is a directory of this machine (data/cache.py). A task with datasets starts through
data/stage.py, which fills what is missing, takes a lease and links ``<task dir><mountPath>``
to the entry's read-only data before it becomes the runner: the local backend has no mount
namespace, so the task finds its data under its own directory, and the environment says where
(``AIPAAS_DATASET_<NAME>_PATH``, ``AIPAAS_DATASETS``). Background loads (prefetch, ``aipaas
dataset warm``) run ``python -m aipaas.data.copier ENTRY`` in their own session: a server that
dies does not stop them, and one killed mid-copy is resumed by the next load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aipaas.backends.base import LaunchRequest, NodeInfo
from aipaas.backends.datasets import CACHE_ANNOTATION, CACHE_STATE_SECONDS, CachedDataset, env_name
from aipaas.backends.local.isolation import TaskIdentity, TaskIsolation
from aipaas.data.cache import NodeCache
from aipaas.data.entry import LOAD
from aipaas.data.stage import STAGE_FILE

DEFAULT_CAPACITY = 100 << 30
#: the Node annotation with the cache's state (JSON), and how often it is read again


@dataclass(frozen=True)
class DatasetCacheConfig:
    root: Path | None = None  # None: beside the task directories (<task root>-datasets)
    capacity_bytes: int = DEFAULT_CAPACITY
    #: where file:// datasets may be read from (nowhere unless a platform admin says)
    file_roots: tuple[str, ...] = field(default_factory=tuple)


class LocalDatasetCaches:
    """Mixed into LocalBackend: ``self.name_of_node``, ``self.isolation`` are the backend's."""

    name_of_node: str
    isolation: TaskIsolation
    _dataset_config: DatasetCacheConfig

    @property
    def node_cache(self) -> NodeCache:
        config = getattr(self, "_dataset_config", None) or DatasetCacheConfig()
        # Beside the task directories (reachable by task users), not in the data directory.
        tasks = self.isolation.task_root
        root = config.root or tasks.with_name(tasks.name + "-datasets")
        return NodeCache(root.resolve(), config.capacity_bytes)

    def with_cache_state(self, node: NodeInfo) -> NodeInfo:
        """The node with its cache's totals as an annotation (``describe node``): capacity,
        bytes held, entries and complete entries. Nodes are seen by every tenant: which
        datasets are held is said only in each tenant's Dataset statuses (the controller
        reads it per entry, ``cached_datasets``). Read again at most every
        CACHE_STATE_SECONDS (it stats every entry)."""
        now = time.monotonic()
        last: tuple[float, str] | None = getattr(self, "_cache_state", None)
        if last is None or now - last[0] >= CACHE_STATE_SECONDS:
            try:
                states = self.node_cache.states()
            except OSError:
                states = []
            summary = {
                "capacityBytes": self.node_cache.capacity_bytes,
                "usedBytes": sum(s.bytes for s in states),
                "entries": len(states),
                "complete": sum(1 for s in states if s.complete),
            }
            last = (now, json.dumps(summary, sort_keys=True, separators=(",", ":")))
            self._cache_state = last
        return replace(node, annotations={**node.annotations, CACHE_ANNOTATION: last[1]})

    def cached_datasets(self) -> list[CachedDataset]:
        return [
            CachedDataset(node=self.name_of_node, **vars(state))
            for state in self.node_cache.states()
        ]

    def cache_capacity(self, node: str) -> int | None:
        return self.node_cache.capacity_bytes if node == self.name_of_node else None

    def load_dataset(self, node: str, key: str, source: Mapping[str, Any]) -> bool:
        if node != self.name_of_node:
            return False
        cache = self.node_cache
        entry = cache.entry(key)
        entry.path.mkdir(parents=True, exist_ok=True)
        if entry.is_locked():
            return False  # a load or a task's staging fills it now
        load = {"source": self._with_roots(source), "capacity": cache.capacity_bytes}
        entry.write_json(LOAD, load, private=True)
        log = open(entry.path / "load.log", "ab")  # noqa: SIM115 (the child keeps it)
        with log:
            subprocess.Popen(
                [sys.executable, "-I", "-m", "aipaas.data.copier", str(entry.path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd="/",
            )
        return True

    def evict_dataset(self, node: str, key: str) -> bool:
        return node == self.name_of_node and self.node_cache.evict(key)

    def cancel_load(self, node: str, key: str) -> bool:
        """Withdraw a background load (its dataset is gone): data/cache.py cancel_load."""
        return node == self.name_of_node and self.node_cache.cancel_load(key)

    def set_cache_hints(self, node: str, pinned: Sequence[str], demand: Mapping[str, int]) -> None:
        if node == self.name_of_node:
            cache = self.node_cache
            cache.root.mkdir(parents=True, exist_ok=True)
            cache.set_hints(list(pinned), demand)

    def stage_command(
        self, request: LaunchRequest, directory: Path, identity: TaskIdentity, env: dict[str, str]
    ) -> list[str]:
        """Write DIR/stage.json (mode 0600: it holds credentials), add the dataset variables
        to ``env`` and return the command that stages, then runs, the task."""
        from aipaas.backends.local.backend import RUNNER

        cache = self.node_cache
        cache.root.mkdir(parents=True, exist_ok=True)
        items = []
        for mount in request.datasets:
            link = identity.home / mount.mount_path.lstrip("/")
            env[env_name(mount.name)] = str(link)
            items.append(
                {
                    "name": mount.name,
                    "key": mount.key,
                    "link": str(link),
                    "source": self._with_roots(mount.source),
                    "stream": mount.stream,
                    "variable": env_name(mount.name),
                }
            )
        if request.datasets:
            env["AIPAAS_DATASETS"] = ",".join(m.name for m in request.datasets)
        outputs = []
        for index, output in enumerate(request.outputs):
            path = identity.home / output.path.lstrip("/")
            env[f"AIPAAS_OUTPUT_{index}_PATH"] = str(path)
            if index == 0:
                env["AIPAAS_OUTPUT_PATH"] = str(path)
            destination = self._with_roots(output.destination)
            outputs.append({"path": str(path), "destination": destination, "always": output.always})
        spec = {
            "cache_root": str(cache.root),
            "capacity": cache.capacity_bytes,
            "datasets": items,
            "outputs": outputs,
            "runner": RUNNER,
            "uid": identity.uid,
            "gid": identity.gid,
        }
        path = directory / STAGE_FILE
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(json.dumps(spec))
        return [sys.executable, "-I", "-m", "aipaas.data.stage", str(directory)]

    def _with_roots(self, source: Mapping[str, Any]) -> dict[str, Any]:
        """The node decides where file:// sources may lie, not the request."""
        config = getattr(self, "_dataset_config", None) or DatasetCacheConfig()
        return {**source, "file_roots": list(config.file_roots)}
