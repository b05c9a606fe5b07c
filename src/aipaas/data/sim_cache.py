"""The simulator's per-node cache: entries filled by loads and by reads, evicted by a policy.

An entry is admitted with room for the whole dataset (it reserves its full size while a load or
a reader fills it); a copy left partial when its reader ends keeps only the bytes it holds.
Eviction is LRU (the cache-without-affinity baseline) or the prefetch policy's score (ours);
both never evict an entry tasks read or a load fills.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aipaas.data.prefetch_policy import (
    CacheEntry,
    NodeCache,
    PrefetchOptions,
    choose_evictions,
)
from aipaas.data.sim_trace import SimDataset


@dataclass
class SimEntry:
    dataset: SimDataset
    bytes: float = 0.0
    last_used: float = 0.0
    #: Pods reading it now.
    readers: int = 0
    #: A prefetch load fills it now.
    loading: bool = False

    @property
    def complete(self) -> bool:
        return self.bytes >= self.dataset.size_bytes

    @property
    def reserved(self) -> float:
        if self.loading or self.readers:
            return float(self.dataset.size_bytes)
        return self.bytes


class SimNodeCache:
    def __init__(self, node: str, capacity_bytes: int) -> None:
        self.node = node
        self.capacity = capacity_bytes
        self.entries: dict[str, SimEntry] = {}

    @property
    def reserved(self) -> float:
        return sum(entry.reserved for entry in self.entries.values())

    def snapshot(self) -> NodeCache:
        """The cache as the prefetch policy reads it."""
        return NodeCache(
            self.node,
            self.capacity,
            tuple(
                CacheEntry(
                    dataset=name,
                    bytes=int(entry.bytes),
                    complete=entry.complete,
                    loading=entry.loading,
                    in_use=entry.readers > 0,
                    last_used=entry.last_used,
                    size_bytes=entry.dataset.size_bytes,
                )
                for name, entry in self.entries.items()
            ),
        )

    def evictable(self, entry: SimEntry) -> bool:
        return not entry.readers and not entry.loading

    def make_room_lru(self, need: float, keep: str = "") -> bool:
        """Evict least recently used entries until ``need`` more bytes fit; False (and nothing
        evicted) when the evictable entries cannot make that much room."""
        free = self.capacity - self.reserved
        victims: list[str] = []
        for name, entry in sorted(self.entries.items(), key=lambda item: item[1].last_used):
            if free >= need:
                break
            if self.evictable(entry) and name != keep:
                victims.append(name)
                free += entry.reserved
        if free < need:
            return False
        for name in victims:
            del self.entries[name]
        return True

    def make_room_scored(
        self,
        need: float,
        now: float,
        demand: Mapping[str, int],
        options: PrefetchOptions,
        keep: str = "",
    ) -> bool:
        """As :meth:`make_room_lru`, choosing victims by the prefetch policy's score."""
        evictions = choose_evictions(
            self.snapshot(), int(need) + 1, now, demand=demand, protected={keep}, options=options
        )
        if evictions is None:
            return False
        for eviction in evictions:
            del self.entries[eviction.dataset]
        return True

    def admit_reader(
        self,
        dataset: SimDataset,
        now: float,
        scored: tuple[Mapping[str, int], PrefetchOptions] | None,
    ) -> SimEntry | None:
        """The entry a starting pod reads through (made, with room for the whole dataset, when
        absent); None when no room can be made: the pod then reads the source uncached."""
        entry = self.entries.get(dataset.name)
        missing = dataset.size_bytes - (entry.reserved if entry is not None else 0.0)
        if missing > 0 and (entry is None or not (entry.loading or entry.readers)):
            made = (
                self.make_room_lru(missing, dataset.name)
                if scored is None
                else self.make_room_scored(missing, now, scored[0], scored[1], dataset.name)
            )
            if not made:
                return None
            entry = self.entries.get(dataset.name)
        if entry is None:
            entry = self.entries[dataset.name] = SimEntry(dataset, last_used=now)
        entry.readers += 1
        entry.last_used = now
        return entry
