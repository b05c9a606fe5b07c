"""Eviction steps of preempt and reclaim, and the order victims are tried in by default.

A ``Unit`` is an elastic task above minAvailable (one task, the newest extra first), or a whole
job (every task it still runs: a gang never drops below minAvailable). ``units_of`` orders them
as victims are taken: extras before whole jobs; among each, lowest priority first, then the
most recently started; ``biggest_first`` is the second order a search tries. The victim order
``lowest-priority-newest`` (batch/policy_rules.py) is these two; victims.py re-exports them
for preempt, reclaim and victim_search.py. Imports the model alone, so that the policy
registry can name it without reaching the session.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aipaas.scheduler.batch.model import Job, Task


@dataclass(frozen=True, slots=True, eq=False)
class Unit:
    """What one eviction step takes: one elastic extra (``task``), or the whole job (``task``
    None: every task it runs when the step is taken)."""

    job: Job
    task: Task | None = None

    @property
    def extra(self) -> bool:
        return self.task is not None

    def tasks(self) -> list[Task]:
        if self.task is not None:
            return [self.task] if self.task.running else []
        return self.job.running_tasks


def task_started(job: Job, task: Task) -> float:
    if task.since is not None:
        return task.since
    return job.started if job.started is not None else 0.0


def units_of(jobs: Iterable[Job]) -> list[Unit]:
    """Eviction steps in the order victims are taken: extras first (newest extra of each job
    first), then whole jobs; each by lowest priority, then most recently started (whole jobs
    started together: the fewest GPUs first, then the last submitted)."""
    # Ties in start time: the smaller job first (less GPU-time lost; the search's second
    # greedy takes bigger ones first when that needs fewer), then the one submitted last.
    extras: list[tuple[tuple[int, float, float, int, str, int], Unit]] = []
    wholes: list[tuple[tuple[int, float, int, float, int, str], Unit]] = []
    for job in jobs:
        running = job.running_tasks
        spare = len(running) - job.min_available
        if spare > 0:
            newest = sorted(running, key=lambda t: (task_started(job, t), t.name), reverse=True)
            # Ties in start time keep newest's order (the higher index first), so that a job
            # shrinks from its top rank down and keeps w-0..w-(n-1), as it was chosen here.
            for rank, task in enumerate(newest[:spare]):
                started = task_started(job, task)
                key = (job.priority, -started, -job.submitted, -job.order, job.key, rank)
                extras.append((key, Unit(job, task)))
        started = job.started if job.started is not None else 0.0
        gpu = job.allocated().gpu_milli
        wholes.append(
            ((job.priority, -started, gpu, -job.submitted, -job.order, job.key), Unit(job))
        )
    extras.sort(key=lambda e: e[0])
    wholes.sort(key=lambda w: w[0])
    return [u for _, u in extras] + [u for _, u in wholes]


def biggest_first(units: Sequence[Unit]) -> list[Unit]:
    """The same steps with whole jobs of equal priority taken biggest first (GPU, then CPU,
    then memory): the second order a search tries, to need fewer victims."""
    extras = [u for u in units if u.extra]
    wholes = [u for u in units if not u.extra]
    place = {id(u): i for i, u in enumerate(wholes)}

    def key(unit: Unit) -> tuple[int, int, int, int, int]:
        held = unit.job.allocated()
        return (
            unit.job.priority,
            -held.gpu_milli,
            -held.cpu_milli,
            -held.memory_mib,
            place[id(unit)],
        )

    return extras + sorted(wholes, key=key)
