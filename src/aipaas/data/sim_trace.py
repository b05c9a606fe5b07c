"""A job trace with a realistic dataset mix, drawn from stated distributions with a seed.

Datasets: ``datasets`` of them, sizes log-normal (median ``size_median_gib``, sigma
``size_sigma``, clipped to ``size_min_gib``..``size_max_gib``), popularity Zipf over their
rank (a job reads dataset of rank r with probability proportional to ``r ** -zipf_s``).
Jobs: Poisson arrivals at the rate that offers ``load`` times the cluster's GPUs; GPUs per job
from ``gpu_mix``; compute time (at full data speed) log-normal (median ``duration_median_h``,
sigma ``duration_sigma``, clipped to 5 minutes..24 hours); each GPU consumes its dataset at a
rate log-normal (median ``read_median_mbps`` MB/s, sigma 0.7, clipped 20..1000 MB/s), the
rate a training input pipeline reads at when the GPU is never starved.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GIB = 1 << 30
MB = 1_000_000


@dataclass(frozen=True, slots=True)
class TraceConfig:
    seed: int = 42
    nodes: int = 32
    gpus_per_node: int = 8
    jobs: int = 1200
    load: float = 1.0
    datasets: int = 200
    zipf_s: float = 1.0
    size_median_gib: float = 100.0
    size_sigma: float = 1.0
    size_min_gib: float = 1.0
    size_max_gib: float = 2048.0
    #: GPUs per job and their probabilities; jobs above a node's GPUs are gangs of whole nodes.
    gpu_mix: tuple[tuple[int, float], ...] = field(
        default=((1, 0.30), (2, 0.15), (4, 0.20), (8, 0.20), (16, 0.10), (32, 0.05))
    )
    duration_median_h: float = 1.5
    duration_sigma: float = 1.0
    read_median_mbps: float = 150.0


@dataclass(frozen=True, slots=True)
class SimDataset:
    name: str
    size_bytes: int


@dataclass(frozen=True, slots=True)
class SimJob:
    name: str
    submit_s: float
    gpus: int
    #: Compute seconds at full data speed.
    duration_s: float
    dataset: SimDataset
    #: Bytes per second each GPU consumes when never starved.
    read_bps_per_gpu: float

    def pods(self, gpus_per_node: int) -> list[int]:
        """GPUs of each pod: whole nodes for a job above one node, else one pod."""
        if self.gpus <= gpus_per_node:
            return [self.gpus]
        return [gpus_per_node] * (self.gpus // gpus_per_node)


@dataclass(frozen=True, slots=True)
class Trace:
    config: TraceConfig
    datasets: tuple[SimDataset, ...]
    jobs: tuple[SimJob, ...]


def make_trace(config: TraceConfig) -> Trace:
    rng = np.random.default_rng(config.seed)
    sizes = rng.lognormal(np.log(config.size_median_gib), config.size_sigma, config.datasets)
    sizes = np.clip(sizes, config.size_min_gib, config.size_max_gib)
    datasets = tuple(
        SimDataset(f"ds-{rank:03d}", int(size * GIB)) for rank, size in enumerate(sizes)
    )
    popularity = np.arange(1, config.datasets + 1, dtype=np.float64) ** -config.zipf_s
    popularity /= popularity.sum()
    counts = np.array([gpus for gpus, _ in config.gpu_mix])
    weights = np.array([p for _, p in config.gpu_mix], dtype=np.float64)
    weights /= weights.sum()

    gpus = rng.choice(counts, size=config.jobs, p=weights)
    durations = np.clip(
        rng.lognormal(np.log(config.duration_median_h * 3600), config.duration_sigma, config.jobs),
        300.0,
        86_400.0,
    )
    read = np.clip(rng.lognormal(np.log(config.read_median_mbps), 0.7, config.jobs), 20, 1000)
    picks = rng.choice(config.datasets, size=config.jobs, p=popularity)
    # Poisson arrivals whose offered GPU-seconds per second are `load` times the cluster's GPUs.
    capacity = config.nodes * config.gpus_per_node
    rate = config.load * capacity / float(np.mean(gpus * durations))
    submits = np.cumsum(rng.exponential(1.0 / rate, config.jobs))
    submits -= submits[0]
    jobs = tuple(
        SimJob(
            name=f"job-{i:05d}",
            submit_s=float(submits[i]),
            gpus=int(gpus[i]),
            duration_s=float(durations[i]),
            dataset=datasets[int(picks[i])],
            read_bps_per_gpu=float(read[i]) * MB,
        )
        for i in range(config.jobs)
    )
    return Trace(config, datasets, jobs)
