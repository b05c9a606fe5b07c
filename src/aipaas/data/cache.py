"""A node's dataset cache: entries under a root, a capacity, eviction that spares readers.

What an entry holds and how it is locked: data/entry.py. Room is made with the prefetch
policy's eviction score (data/prefetch_policy.py: recency, size, queued demand; pinned entries
and entries being loaded never go), and an entry is removed only under its own lock with no
live lease: a file a task reads is never evicted. The controller's hints (which entries are
pinned, how many queued jobs need each) are in ``<root>/policy.json``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aipaas.data.entry import ERROR, LOAD, MANIFEST, PART_SUFFIX, STATS, Busy, Entry
from aipaas.data.prefetch_policy import CacheEntry, choose_evictions
from aipaas.data.prefetch_policy import NodeCache as PolicyCache

POLICY = "policy.json"


class CacheFull(Exception):
    """No room for a dataset: what is cached is pinned, read now or being loaded."""


def entry_key(tenant: str, dataset: str, fingerprint: str) -> str:
    """``tenant/dataset-hash``: a changed source gets a fresh entry; tenants never share one."""
    digest = hashlib.sha256(fingerprint.encode()).hexdigest()[:12]
    return f"{tenant}/{dataset}-{digest}"


@dataclass(frozen=True)
class EntryState:
    key: str
    bytes: int
    size_bytes: int | None
    complete: bool
    files: int
    in_use: int
    loading: bool
    last_used: float
    hits: int
    misses: int
    bytes_from_source: int
    bytes_from_cache: int
    error: str


class NodeCache:
    def __init__(self, root: Path, capacity_bytes: int) -> None:
        self.root = root
        self.capacity_bytes = capacity_bytes

    def entry(self, key: str) -> Entry:
        tenant, _, name = key.partition("/")
        if not tenant or not name or "/" in name or name.startswith(".") or tenant.startswith("."):
            raise ValueError(f"invalid cache key {key!r}")
        return Entry(self.root / tenant / name)

    def keys(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            f"{tenant.name}/{entry.name}"
            for tenant in self.root.iterdir()
            if tenant.is_dir() and not tenant.name.startswith(".")
            for entry in tenant.iterdir()
            if entry.is_dir() and not entry.name.startswith(".")
        )

    def state(self, key: str) -> EntryState:
        entry = self.entry(key)
        manifest = entry.read_json(MANIFEST)
        stats = entry.read_json(STATS)
        files = manifest.get("files", {})
        present = 0
        for relative, record in files.items():
            name = relative if record.get("done") else relative + PART_SUFFIX
            with contextlib.suppress(OSError):
                present += (entry.data / name).stat().st_size
        error = ""
        with contextlib.suppress(OSError):
            error = (entry.path / ERROR).read_text()[:500]
        return EntryState(
            key=key,
            bytes=present,
            size_bytes=manifest.get("size"),
            complete=bool(manifest.get("complete")),
            files=len(files),
            in_use=len(entry.live_leases()),
            loading=entry.is_locked(),
            last_used=float(stats.get("last_used", 0)),
            hits=int(stats.get("hits", 0)),
            misses=int(stats.get("misses", 0)),
            bytes_from_source=int(stats.get("bytes_from_source", 0)),
            bytes_from_cache=int(stats.get("bytes_from_cache", 0)),
            error=error,
        )

    def states(self) -> list[EntryState]:
        return [self.state(key) for key in self.keys()]

    def evict(self, key: str) -> bool:
        """Remove the entry unless it is read now or locked (loading, staging): True if gone."""
        entry = self.entry(key)
        try:
            with entry.locked(wait=False):
                if entry.live_leases():
                    return False
                # Renamed first: a reader that finds the path finds a whole entry or none.
                grave = entry.path.with_name(f".evicted-{entry.path.name}-{os.getpid()}")
                os.replace(entry.path, grave)
        except (Busy, FileNotFoundError):
            return False
        shutil.rmtree(grave, ignore_errors=True)
        return True

    def cancel_load(self, key: str) -> bool:
        """Withdraw the entry's background load (its dataset is gone): its copier sees its
        load.json gone and ends within a second (data/copier.py); True if one was there."""
        try:
            (self.entry(key).path / LOAD).unlink()
        except FileNotFoundError:
            return False
        return True

    def room_for(self, entry: Entry) -> Callable[[int], None]:
        """``reserve`` for a fill of ``entry``: evict by the policy until the bytes fit."""

        def reserve(needed: int) -> None:
            self.make_room(needed, keep=entry.path)

        return reserve

    def make_room(self, needed: int, *, keep: Path) -> list[str]:
        """Evict until ``needed`` more bytes fit (``CacheFull`` when they cannot): the
        policy's choice, then each evicted under its own lock (a victim that became busy in
        between is skipped and the choice made again)."""
        evicted: list[str] = []
        for _attempt in range(8):
            states = [s for s in self.states() if self.entry(s.key).path != keep]
            hints = self._hints()
            pinned = {str(k) for k in hints.get("pinned", [])}
            demand = {str(k): int(v) for k, v in dict(hints.get("demand", {})).items()}
            current = PolicyCache(
                node="",
                capacity_bytes=self.capacity_bytes,
                entries=tuple(_policy_entry(s, s.key in pinned) for s in states),
            )
            chosen = choose_evictions(current, needed, time.time(), demand=demand)
            if chosen is None:
                raise CacheFull(
                    f"{needed} bytes do not fit in the cache of {self.capacity_bytes} bytes: "
                    "what is there is pinned, read now or being loaded"
                )
            if not chosen:
                return evicted
            for eviction in chosen:
                if self.evict(eviction.dataset):
                    evicted.append(eviction.dataset)
        raise CacheFull("the cache changed under every attempt to make room")

    def _hints(self) -> dict[str, Any]:
        return Entry(self.root).read_json(POLICY)

    def set_hints(self, pinned: list[str], demand: Mapping[str, int]) -> None:
        # Private: it names every tenant's datasets, and task users can reach the root.
        hints = {"pinned": sorted(pinned), "demand": dict(demand)}
        Entry(self.root).write_json(POLICY, hints, private=True)


def _policy_entry(state: EntryState, pinned: bool) -> CacheEntry:
    return CacheEntry(
        dataset=state.key,
        bytes=state.bytes,
        complete=state.complete,
        loading=state.loading,
        pinned=pinned,
        in_use=state.in_use > 0,
        last_used=state.last_used,
        size_bytes=state.size_bytes,
    )
