"""What the prefetch policy reads and what it answers: pure data, no behaviour.

Sizes are bytes; times are seconds on the caller's clock (virtual in simulation, epoch seconds
in the live controller). Datasets are named by a key the caller chooses (the live controller
uses ``tenant/name``, so two tenants' datasets of the same name never meet).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class DatasetNeed:
    """A dataset a queued job reads: its full size and its cache policy."""

    dataset: str
    size_bytes: int
    #: Nodes that may cache it (its cache policy's node pools, resolved); None: any node.
    cacheable_on: frozenset[str] | None = None
    #: How many nodes may hold a copy at most; None: no limit.
    max_replicas: int | None = None

    def __post_init__(self) -> None:
        if self.size_bytes < 0:
            raise ValueError(f"dataset {self.dataset!r}: size_bytes must be >= 0")
        if self.max_replicas is not None and self.max_replicas < 1:
            raise ValueError(f"dataset {self.dataset!r}: max_replicas must be >= 1")


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job at the head of a queue, in scheduling order.

    ``nodes`` are the nodes likely to run its tasks (all of them need each dataset: a gang's
    data-parallel workers each read the whole dataset), best guess first.
    """

    name: str
    datasets: tuple[DatasetNeed, ...]
    nodes: tuple[str, ...]
    #: When it is expected to start (caller's clock); None: unknown, served in any case.
    expected_start: float | None = None


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One dataset in one node's cache."""

    dataset: str
    #: Bytes present on the node (a partial copy counts what it holds).
    bytes: int
    complete: bool = False
    #: A load into this entry is running now.
    loading: bool = False
    #: Pinned by its cache policy: never evicted for room (time to live still applies).
    pinned: bool = False
    #: Tasks read it now: never evicted, even past its time to live.
    in_use: bool = False
    #: When a task last read it (or it was loaded), caller's clock.
    last_used: float = 0.0
    #: When its time to live ends; None: no end.
    expires_at: float | None = None
    #: The dataset's full size when known: a load in progress reserves it all.
    size_bytes: int | None = None

    @property
    def reserved_bytes(self) -> int:
        """Room this entry takes or will take once its running load ends."""
        if self.loading and self.size_bytes is not None:
            return max(self.bytes, self.size_bytes)
        return self.bytes


@dataclass(frozen=True, slots=True)
class NodeCache:
    node: str
    capacity_bytes: int
    entries: tuple[CacheEntry, ...] = ()

    @property
    def reserved_bytes(self) -> int:
        return sum(entry.reserved_bytes for entry in self.entries)

    def entry(self, dataset: str) -> CacheEntry | None:
        return next((e for e in self.entries if e.dataset == dataset), None)


@dataclass(frozen=True, slots=True)
class PrefetchOptions:
    #: How many jobs from the head of the queue prefetch looks at.
    lookahead_jobs: int = 8
    #: Loads running at once on one node (running ones count).
    max_loads_per_node: int = 2
    #: Seconds after which recency stops protecting an entry half as much (eviction score).
    recency_half_life_s: float = 3600.0
    #: How much each queued job needing an entry lowers its eviction score.
    demand_weight: float = 4.0
    #: Jobs expected to start later than this many seconds from now are not served yet: by
    #: then they will likely be predicted onto other nodes (None: no limit). One hour measured
    #: best in benchmarks/data_sim.py: against no limit, as little waiting for data and 6-10%
    #: fewer bytes from the source (seeds 42, 43); half an hour and two hours waited longer.
    horizon_s: float | None = 3600.0
    #: Keep one copy somewhere of every queued job's data (for caches that serve each other).
    seed_copies: bool = False


@dataclass(frozen=True, slots=True)
class PrefetchInput:
    #: Jobs waiting, in scheduling order (fair share, priority): the head first.
    queue: Sequence[QueuedJob]
    nodes: Sequence[NodeCache]
    now: float
    options: PrefetchOptions = field(default_factory=PrefetchOptions)


@dataclass(frozen=True, slots=True)
class Load:
    """Copy ``bytes`` more of ``dataset`` onto ``node`` (resuming what is there), for ``job``."""

    dataset: str
    node: str
    bytes: int
    job: str


@dataclass(frozen=True, slots=True)
class Eviction:
    """Remove ``dataset`` from ``node``; ``score`` is its eviction score (higher goes first),
    ``reason`` is "expired" or "room" (for the event)."""

    dataset: str
    node: str
    bytes: int
    score: float
    reason: str


@dataclass(frozen=True, slots=True)
class Skipped:
    """A load the policy did not start, and why (for events and describe)."""

    dataset: str
    node: str
    job: str
    reason: str


@dataclass(frozen=True, slots=True)
class PrefetchPlan:
    loads: tuple[Load, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    skipped: tuple[Skipped, ...] = ()
