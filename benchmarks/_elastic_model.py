"""The models behind benchmarks/elastic_day.py: a diurnal load curve, an M/M/c queue per
service for the share of requests answered within the latency bound, and a batch backlog.

Stated assumptions (the doc repeats them):
- requests of a service arrive as a Poisson process whose rate follows the load curve, and
  each takes an exponential service time on one replica (one GPU): an M/M/c queue, taken as
  steady within each step of the simulation (quasi-static);
- a replica serves only once ready (model load time after its GPU is free); a node of a pool
  takes its provisioning delay;
- batch jobs use GPUs as interchangeable slots (no node fragmentation), checkpoint every
  ``checkpoint_s`` and lose the progress since their last checkpoint when evicted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def erlang_c(servers: int, offered: float) -> float:
    """Probability that a request waits in an M/M/c queue (``offered`` = arrival rate /
    service rate); 1 when the queue is unstable."""
    if servers <= 0 or offered >= servers:
        return 1.0
    if offered <= 0:
        return 0.0
    blocking = 1.0  # Erlang B, computed upwards (stable for large c)
    for k in range(1, servers + 1):
        blocking = offered * blocking / (k + offered * blocking)
    rho = offered / servers
    return blocking / (1 - rho * (1 - blocking))


def within_bound(rate: float, service_rate: float, servers: int, bound_s: float) -> float:
    """Share of requests whose response time (wait + service) is at most ``bound_s``."""
    if rate <= 0:
        return 1.0
    if servers <= 0 or rate >= servers * service_rate:
        return 0.0
    waits = erlang_c(servers, rate / service_rate)
    theta = servers * service_rate - rate  # the rate at which a wait ends
    mu = service_rate
    if abs(theta - mu) < 1e-9:
        both = (1 + mu * bound_s) * math.exp(-mu * bound_s)
    else:
        both = (mu * math.exp(-theta * bound_s) - theta * math.exp(-mu * bound_s)) / (mu - theta)
    late = (1 - waits) * math.exp(-mu * bound_s) + waits * both
    return 1.0 - late


@dataclass(frozen=True)
class Curve:
    """rate(t) = peak x (trough + (1 - trough) x day(t)) x noise(t); day(t) is a raised cosine
    with its low at ``low_hour`` and its high twelve hours later; noise is AR(1) log-normal."""

    peak_rps: float
    trough: float = 0.15
    low_hour: float = 4.0
    noise_sigma: float = 0.05


def rates(curve: Curve, steps: int, step_s: float, rng: np.random.Generator) -> np.ndarray:
    hours = np.arange(steps) * step_s / 3600
    day = 0.5 - 0.5 * np.cos(2 * np.pi * (hours - curve.low_hour) / 24)
    noise = np.empty(steps)
    level = 0.0
    for i in range(steps):  # slowly wandering noise: a minute is like the minute before
        level = 0.95 * level + rng.normal(0, curve.noise_sigma * math.sqrt(1 - 0.95**2))
        noise[i] = level
    result: np.ndarray = curve.peak_rps * (curve.trough + (1 - curve.trough) * day) * np.exp(noise)
    return result


@dataclass
class BatchJob:
    name: str
    gpus: int
    work_s: float  # seconds of running to finish
    done_s: float = 0.0  # seconds of progress kept (at checkpoints)
    running_since: float | None = None


def backlog(rng: np.random.Generator, jobs: int) -> list[BatchJob]:
    """Batch work waiting at the start of the day: 1-8 GPUs, 20 minutes to 3 hours each."""
    sizes = rng.choice([1, 2, 4, 8], size=jobs, p=[0.4, 0.3, 0.2, 0.1])
    minutes = rng.uniform(20, 180, size=jobs)
    return [
        BatchJob(f"b{i}", int(g), float(m) * 60)
        for i, (g, m) in enumerate(zip(sizes, minutes, strict=True))
    ]


@dataclass
class SpotTier:
    """Spot batch jobs on lent GPUs: started in backlog order where they fit, evicted (most
    recently started first, as reclaim orders victims of one priority) when the lender needs
    GPUs, keeping the progress of their last checkpoint."""

    queue: list[BatchJob]
    checkpoint_s: float
    running: list[BatchJob]
    useful_gpu_s: float = 0.0
    lost_gpu_s: float = 0.0
    evictions: int = 0
    completed: int = 0

    def used(self) -> int:
        return sum(job.gpus for job in self.running)

    def step(self, now: float, lendable: int) -> None:
        """Evict until the spot work fits ``lendable`` GPUs, finish, then start more."""
        while self.used() > lendable:
            victim = max(self.running, key=lambda j: j.running_since or 0.0)
            self._evict(victim, now)
        for job in list(self.running):
            assert job.running_since is not None
            if job.done_s + (now - job.running_since) >= job.work_s:
                self.running.remove(job)
                self.useful_gpu_s += (job.work_s - job.done_s) * job.gpus
                self.completed += 1
        free = lendable - self.used()
        for job in list(self.queue):
            if job.gpus <= free:
                self.queue.remove(job)
                job.running_since = now
                self.running.append(job)
                free -= job.gpus

    def _evict(self, job: BatchJob, now: float) -> None:
        assert job.running_since is not None
        ran = now - job.running_since
        kept = math.floor(ran / self.checkpoint_s) * self.checkpoint_s
        self.useful_gpu_s += kept * job.gpus
        self.lost_gpu_s += (ran - kept) * job.gpus
        job.done_s += kept
        job.running_since = None
        self.running.remove(job)
        self.queue.insert(0, job)  # first in line again
        self.evictions += 1

    def close(self, now: float) -> None:
        """The day ends: running jobs' progress up to now counts (a checkpoint at the end)."""
        for job in self.running:
            assert job.running_since is not None
            self.useful_gpu_s += (now - job.running_since) * job.gpus
