"""The simulated data plane's settings, policies and running jobs: plain data.

Data-plane defaults (stated in docs/data.md): an object store serving 500 MB/s to one node
(many mid-size objects over HTTP) and 10 GB/s in all; a node's NVMe cache (a DGX-class RAID of
four drives) serving its tasks 16 GB/s; 8 TiB of cache per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aipaas.data.affinity_profile import DEFAULT_WEIGHT
from aipaas.data.prefetch_policy import PrefetchOptions
from aipaas.data.sim_cache import SimEntry
from aipaas.data.sim_trace import SimJob

MBPS = 1_000_000
TIB = 1 << 40


@dataclass(frozen=True, slots=True)
class DataPlane:
    source_to_node_bps: float = 500 * MBPS
    source_total_bps: float = 10_000 * MBPS
    cache_to_task_bps: float = 16_000 * MBPS
    cache_bytes_per_node: int = 8 * TIB
    #: What one node's network moves to or from peers (25 GbE), for policies where peers serve.
    peer_bps: float = 3_000 * MBPS


@dataclass(frozen=True, slots=True)
class Policy:
    """``cache``: nodes cache what tasks read (filled on first read); ``affinity``: placement
    prefers nodes holding the job's data; ``prefetch``: the queue's heads are warmed ahead and
    eviction uses the prefetch policy's score (LRU otherwise); ``peers``: the caches serve
    each other, as a distributed cache does (a cold node reads a complete copy elsewhere)."""

    name: str
    cache: bool
    affinity: bool = False
    prefetch: bool = False
    #: A node reads a complete copy on another node before it reads the source.
    peers: bool = False


NO_CACHE = Policy("no cache", cache=False)
CACHE_ONLY = Policy("cache, data-blind placement (Fluid default)", cache=True)
OURS = Policy("ours: affinity + prefetch", cache=True, affinity=True, prefetch=True)
AFFINITY_ONLY = Policy("cache + affinity, no prefetch", cache=True, affinity=True)
PREFETCH_ONLY = Policy("cache + prefetch, no affinity", cache=True, prefetch=True)
CACHE_PEERS = Policy(
    "distributed cache (peers serve), data-blind placement", cache=True, peers=True
)
OURS_PEERS = Policy("ours, peers serve", cache=True, affinity=True, prefetch=True, peers=True)


@dataclass(frozen=True, slots=True)
class SimSettings:
    plane: DataPlane = field(default_factory=DataPlane)
    #: Seconds per step of the simulated clock.
    step_s: float = 30.0
    #: A job waiting longer than this blocks the jobs behind it (no starvation of gangs).
    starvation_s: float = 2 * 3600.0
    #: Sigma of the log-normal error of runtime estimates the predictor uses.
    estimate_sigma: float = 0.3
    prefetch: PrefetchOptions = field(default_factory=PrefetchOptions)
    #: DataAffinity's weight in the profile (ours); the base profile is ``default``.
    affinity_weight: int = DEFAULT_WEIGHT
    #: A bound on simulated time past the last arrival (seconds).
    drain_limit_s: float = 30 * 86_400.0


@dataclass
class PodRun:
    node: str
    gpus: int
    #: Bytes per second it consumes when never starved.
    demand: float
    #: The cache entry it reads through (None: it reads the source uncached).
    entry: SimEntry | None
    #: Bytes consumed so far (all passes).
    consumed: float = 0.0
    #: The dataset it reads (when ``entry`` is None too).
    dataset: str = ""
    #: Rate granted this step, and where from: "cache", "peer" or "source".
    rate: float = 0.0
    path: str = "source"


@dataclass
class JobRun:
    job: SimJob
    start_s: float
    pods: list[PodRun]
    placements: list[object]
    #: Compute seconds done (at full speed one per second).
    progress_s: float = 0.0
    #: GPU-seconds stalled on data.
    stall_gpu_s: float = 0.0
    #: Wall seconds stalled on data during the first pass over the dataset.
    first_pass_stall_s: float = 0.0
    #: Estimated / actual runtime factor, for the predictor.
    estimate_factor: float = 1.0


@dataclass(frozen=True, slots=True)
class JobResult:
    name: str
    gpus: int
    submit_s: float
    start_s: float
    end_s: float
    stall_gpu_s: float
    first_pass_stall_s: float

    @property
    def start_delay_s(self) -> float:
        """Queueing plus the stall on data before its first pass over the data is read."""
        return self.start_s - self.submit_s + self.first_pass_stall_s
