"""Datasets on a backend's nodes: what a task mounts, and the optional cache capability.

``LaunchRequest.datasets`` carries what a task reads (``DatasetMount``: the cache entry's key,
the source with its credentials, where the task sees it) and ``LaunchRequest.outputs`` what it
writes back (``OutputUpload``). A backend that caches datasets on its
nodes also offers ``DatasetCaches`` (checked with ``dataset_caches``, never by name): the
controller's dataset extension reads each node's entries and asks for loads and evictions; the
backend copies (data/copier.py) and never evicts what a task reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

#: the Node annotation a node's dataset cache state is published under
CACHE_ANNOTATION = "aipaas.dev/dataset-cache"
#: how often a node's cache state is published
CACHE_STATE_SECONDS = 5.0


def env_name(dataset: str) -> str:
    """The variable that tells a task where a dataset is (every engine sets the same)."""
    return "AIPAAS_DATASET_" + re.sub(r"[^A-Z0-9]", "_", dataset.upper()) + "_PATH"


@dataclass(frozen=True)
class DatasetMount:
    name: str  # the Dataset's name
    key: str  # the cache entry: tenant/name-hash (data/cache.py entry_key)
    mount_path: str  # where the job asked to see it
    #: data/source.py SourceSpec.to_json(): url, endpoint, credentials, subPaths, include
    source: Mapping[str, Any]
    require_warm: bool = False
    #: a cold cache is not waited for: the task reads the source (the policy's streaming)
    stream: bool = False


@dataclass(frozen=True)
class OutputUpload:
    """A directory the task writes at ``path``, uploaded to ``destination`` when it ends."""

    path: str
    #: data/source.py SourceSpec.to_json() of the destination: url, endpoint, credentials
    destination: Mapping[str, Any]
    #: uploaded at the end of every attempt (``uploadOn: Always``), not only after exit code 0
    always: bool = False


@dataclass(frozen=True)
class CachedDataset:
    """One entry of one node's cache as the node reports it."""

    node: str
    key: str
    bytes: int
    size_bytes: int | None
    complete: bool
    files: int
    in_use: int
    loading: bool
    last_used: float
    hits: int = 0
    misses: int = 0
    bytes_from_source: int = 0
    bytes_from_cache: int = 0
    error: str = ""


class DatasetCaches(Protocol):
    def cached_datasets(self) -> list[CachedDataset]:
        """Every entry of every node's cache (reading it may take a few stat calls)."""
        ...

    def cache_capacity(self, node: str) -> int | None:
        """Bytes the node's cache may hold; None: the node has no cache here."""
        ...

    def load_dataset(self, node: str, key: str, source: Mapping[str, Any]) -> bool:
        """Start filling the entry in the background (resuming what is there); False when the
        node cannot (no cache here, a load already running)."""
        ...

    def evict_dataset(self, node: str, key: str) -> bool:
        """Remove the entry unless a task reads it or it is being filled; True if gone."""
        ...

    def set_cache_hints(self, node: str, pinned: Sequence[str], demand: Mapping[str, int]) -> None:
        """What the node's own evictions weigh: pinned entries, queued jobs per entry."""
        ...


_METHODS = ("cached_datasets", "cache_capacity", "load_dataset", "evict_dataset")
#: optional: ``cancel_load(node, key) -> bool`` withdraws a background load whose dataset is
#: gone (its copier ends); the controller calls it where a backend has it
CANCEL_LOAD = "cancel_load"


def dataset_caches(backend: object) -> DatasetCaches | None:
    """The backend's caches: the backend itself, the backend it wraps (fencing) or its members
    that have one (several backends side by side)."""
    if all(hasattr(backend, m) for m in _METHODS):
        return cast(DatasetCaches, backend)
    inner = getattr(backend, "inner", None)
    if inner is not None:
        return dataset_caches(inner)
    members = getattr(backend, "backends", None)
    if isinstance(members, tuple | list):
        found = [c for c in (dataset_caches(m) for m in members) if c is not None]
        if len(found) == 1:
            return found[0]
        if found:
            return _Joined(found)
    return None


class _Joined:
    """Several members' caches as one (each node is one member's)."""

    def __init__(self, members: list[DatasetCaches]) -> None:
        self.members = members

    def _owner(self, node: str) -> DatasetCaches | None:
        return next((m for m in self.members if m.cache_capacity(node) is not None), None)

    def cached_datasets(self) -> list[CachedDataset]:
        return [entry for m in self.members for entry in m.cached_datasets()]

    def cache_capacity(self, node: str) -> int | None:
        owner = self._owner(node)
        return owner.cache_capacity(node) if owner is not None else None

    def load_dataset(self, node: str, key: str, source: Mapping[str, Any]) -> bool:
        owner = self._owner(node)
        return owner.load_dataset(node, key, source) if owner is not None else False

    def evict_dataset(self, node: str, key: str) -> bool:
        owner = self._owner(node)
        return owner.evict_dataset(node, key) if owner is not None else False

    def cancel_load(self, node: str, key: str) -> bool:
        cancel = getattr(self._owner(node), CANCEL_LOAD, None)
        return bool(cancel(node, key)) if cancel is not None else False

    def set_cache_hints(self, node: str, pinned: Sequence[str], demand: Mapping[str, int]) -> None:
        owner = self._owner(node)
        if owner is not None:
            owner.set_cache_hints(node, pinned, demand)
