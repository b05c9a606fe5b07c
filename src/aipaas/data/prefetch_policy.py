"""Prefetch that follows the queue: which datasets to copy onto which nodes, what to evict.

Pure (no I/O): the live controller (controller/datasets.py) and the simulator call the same
:func:`plan_prefetch`. The rules, in order:

1. An entry past its time to live is evicted unless tasks read it now or a job served now
   (rule 2) is about to read it there (with ``seed_copies``: any queued job reads it).
2. Jobs are served from the head of the queue (the order the batch scheduler admits them in,
   fair share included), at most ``lookahead_jobs`` of them, less those expected to start
   past ``horizon_s`` from now; each dataset of a job is loaded on every node likely to run
   one of its tasks, within the dataset's cache policy (nodes that may cache it, replica
   count) and at most ``max_loads_per_node`` loads at once on a node.
3. Room is made by evicting the entries with the highest :func:`eviction_score`; never an entry
   tasks read now, a pinned one, one being loaded, nor one a job at or ahead of this one in the
   queue needs on this node. When that cannot make room, nothing is evicted for the load.
4. With ``seed_copies`` (for caches that serve each other), each queued job's dataset that no
   node holds gets one copy on the node with the most free room.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from aipaas.data.prefetch_types import (
    CacheEntry,
    DatasetNeed,
    Eviction,
    Load,
    NodeCache,
    PrefetchInput,
    PrefetchOptions,
    PrefetchPlan,
    QueuedJob,
    Skipped,
)

__all__ = [
    "CacheEntry",
    "DatasetNeed",
    "Eviction",
    "Load",
    "NodeCache",
    "PrefetchInput",
    "PrefetchOptions",
    "PrefetchPlan",
    "QueuedJob",
    "Skipped",
    "choose_evictions",
    "eviction_score",
    "plan_prefetch",
    "queue_demand",
]

GIB = 1 << 30


def eviction_score(
    entry: CacheEntry, now: float, demand: int, options: PrefetchOptions
) -> float | None:
    """How readily ``entry`` goes when room is needed (higher first); None: never for room.

    Age since last use raises the score linearly in half-lives (recency); size raises it with
    the square root (one big stale entry frees what many small ones would, but costs more to
    load again); each queued job that needs the dataset divides it (demand).
    """
    if entry.in_use or entry.pinned or entry.loading:
        return None
    age = max(0.0, now - entry.last_used)
    recency = 1.0 + age / options.recency_half_life_s
    size: float = (max(entry.bytes, 1) / GIB) ** 0.5
    return recency * size / (1.0 + options.demand_weight * demand)


def choose_evictions(
    cache: NodeCache,
    need_bytes: int,
    now: float,
    *,
    demand: Mapping[str, int] | None = None,
    protected: Collection[str] = (),
    options: PrefetchOptions | None = None,
) -> list[Eviction] | None:
    """Evictions that leave ``need_bytes`` free on the node, highest score first; [] when it is
    free already; None when the evictable entries cannot make that much room."""
    options = options or PrefetchOptions()
    demand = demand or {}
    free = cache.capacity_bytes - cache.reserved_bytes
    if free >= need_bytes:
        return []
    scored: list[tuple[float, CacheEntry]] = []
    for entry in cache.entries:
        if entry.dataset in protected:
            continue
        score = eviction_score(entry, now, demand.get(entry.dataset, 0), options)
        if score is not None:
            scored.append((score, entry))
    scored.sort(key=lambda item: (-item[0], item[1].dataset))
    chosen: list[Eviction] = []
    for score, entry in scored:
        if free >= need_bytes:
            break
        chosen.append(Eviction(entry.dataset, cache.node, entry.bytes, score, "room"))
        free += entry.reserved_bytes
    return chosen if free >= need_bytes else None


def queue_demand(queue: Collection[QueuedJob]) -> Counter[str]:
    """How many queued jobs name each dataset."""
    return Counter(need.dataset for job in queue for need in job.datasets)


class _Planner:
    """The caches as the plan changes them, and what the plan has decided so far."""

    def __init__(self, request: PrefetchInput) -> None:
        self.request = request
        self.options = request.options
        self.caches: dict[str, NodeCache] = {cache.node: cache for cache in request.nodes}
        self.demand = queue_demand(request.queue)
        self.loads: list[Load] = []
        self.evictions: list[Eviction] = []
        self.skipped: list[Skipped] = []
        #: (node, dataset) pairs the jobs planned so far need: later jobs may not evict them.
        self.protected: set[tuple[str, str]] = set()

    def replicas(self, dataset: str) -> int:
        return sum(1 for cache in self.caches.values() if cache.entry(dataset) is not None)

    def loads_running(self, node: str) -> int:
        return sum(1 for entry in self.caches[node].entries if entry.loading)

    def _replace(self, node: str, entries: list[CacheEntry]) -> None:
        cache = self.caches[node]
        self.caches[node] = NodeCache(cache.node, cache.capacity_bytes, tuple(entries))

    def expire(self, wanted: set[tuple[str, str]]) -> None:
        """Evict entries past their time to live, but those a served job is about to read."""
        now = self.request.now
        for node, cache in list(self.caches.items()):
            kept: list[CacheEntry] = []
            for entry in cache.entries:
                expired = entry.expires_at is not None and entry.expires_at <= now
                if expired and not (
                    entry.in_use or entry.loading or (node, entry.dataset) in wanted
                ):
                    self.evictions.append(Eviction(entry.dataset, node, entry.bytes, 0, "expired"))
                else:
                    kept.append(entry)
            self._replace(node, kept)

    def seed(self, queue: Sequence[QueuedJob]) -> None:
        """One copy somewhere of each queued job's data held nowhere yet (head first), on the
        node with the most free room that may take it: where caches serve each other, any
        copy spares the source."""
        for job in queue:
            for need in job.datasets:
                if self.replicas(need.dataset) > 0:
                    continue
                nodes = [n for n in self.caches if self._refusal(need, n, None) is None]
                if nodes:
                    roomiest = max(nodes, key=lambda n: (self._free(n), n))
                    self._load(job, need, roomiest)

    def _free(self, node: str) -> int:
        cache = self.caches[node]
        return cache.capacity_bytes - cache.reserved_bytes

    def serve(self, job: QueuedJob) -> None:
        for node in job.nodes:
            for need in job.datasets:
                self.protected.add((node, need.dataset))
        for need in job.datasets:
            for node in dict.fromkeys(job.nodes):
                if node in self.caches:
                    self._load(job, need, node)

    def _refusal(self, need: DatasetNeed, node: str, entry: CacheEntry | None) -> str | None:
        """Why ``need`` may not start loading on ``node`` now (None: it may)."""
        cache = self.caches[node]
        if need.cacheable_on is not None and node not in need.cacheable_on:
            return "its cache policy keeps it off this node"
        if need.size_bytes > cache.capacity_bytes:
            return "larger than the node's cache"
        limit = need.max_replicas
        if entry is None and limit is not None and self.replicas(need.dataset) >= limit:
            return f"{limit} replicas already"
        if self.loads_running(node) >= self.options.max_loads_per_node:
            return "the node loads as much as it may at once"
        return None

    def _load(self, job: QueuedJob, need: DatasetNeed, node: str) -> None:
        cache = self.caches[node]
        entry = cache.entry(need.dataset)
        if entry is not None and (entry.complete or entry.loading):
            return
        refusal = self._refusal(need, node, entry)
        if refusal is not None:
            self.skipped.append(Skipped(need.dataset, node, job.name, refusal))
            return
        present = entry.bytes if entry is not None else 0
        protected = {d for (n, d) in self.protected if n == node}
        others = NodeCache(
            node, cache.capacity_bytes, tuple(e for e in cache.entries if e != entry)
        )
        evictions = choose_evictions(
            others,
            need.size_bytes,
            self.request.now,
            demand=self.demand,
            protected=protected,
            options=self.options,
        )
        if evictions is None:
            reason = "no room: what is there may not be evicted"
            self.skipped.append(Skipped(need.dataset, node, job.name, reason))
            return
        gone = {eviction.dataset for eviction in evictions}
        self.evictions.extend(evictions)
        kept = [e for e in others.entries if e.dataset not in gone]
        kept.append(
            CacheEntry(
                need.dataset,
                present,
                loading=True,
                last_used=self.request.now,
                size_bytes=need.size_bytes,
                expires_at=entry.expires_at if entry is not None else None,
            )
        )
        self._replace(node, kept)
        self.loads.append(Load(need.dataset, node, need.size_bytes - present, job.name))


def plan_prefetch(request: PrefetchInput) -> PrefetchPlan:
    """Loads to start and evictions to make now, for the jobs at the head of the queue."""
    planner = _Planner(request)
    horizon = request.options.horizon_s
    served = [
        job
        for job in list(request.queue)[: request.options.lookahead_jobs]
        # A job expected later will likely be predicted onto other nodes by then: not yet.
        if job.expected_start is None
        or horizon is None
        or job.expected_start <= request.now + horizon
    ]
    wanted = {(node, n.dataset) for job in served for node in job.nodes for n in job.datasets}
    if request.options.seed_copies:  # a copy anywhere serves the queue: keep what it reads
        wanted |= {(node, d) for node in planner.caches for d in planner.demand}
    planner.expire(wanted)
    for job in served:
        planner.serve(job)
    if request.options.seed_copies:
        planner.seed(request.queue)
    return PrefetchPlan(tuple(planner.loads), tuple(planner.evictions), tuple(planner.skipped))
