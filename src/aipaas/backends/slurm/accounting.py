"""When Slurm really ran a task's job, for the usage ledger.

In third-party mode a task may wait in Slurm's queue long after aipaas asked for it, and a
server that was down sees a job end late: the controller's own observations would charge the
queue or the downtime. Slurm knows better. A job that has ended is read from accounting
(``sacct --json``, where the cluster runs slurmdbd: one call for every job that ended in the
controller's cycle); where there is no accounting, or it has not caught up with slurmctld yet,
from slurmctld's own record (``squeue --json``: the same clock, the same times, kept MinJobAge
seconds). A running job's start comes from slurmctld (a pending job's start_time is only
Slurm's estimate: not used).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from aipaas.backends.slurm import jobs

Times = tuple[datetime | None, datetime | None]


def epoch(value: Any) -> datetime | None:
    """A Slurm time (seconds since the epoch; ``{"set", "number"}`` after 22.05); 0: none."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return datetime.fromtimestamp(value, UTC)
    return None


def squeue_times(job: Mapping[str, Any]) -> Times:
    """(start, end) from slurmctld's record; a job not started yet has neither."""
    state = jobs.job_state(job)
    if state in jobs.WAITING:
        return None, None
    start = epoch(job.get("start_time"))
    end = None if state in jobs.ACTIVE else epoch(job.get("end_time"))
    return start, end


def sacct_times(raw: list[dict[str, Any]]) -> dict[int, Times]:
    """(start, end) per job id from ``sacct --json``'s jobs; a job accounting still has
    running (it learns of the end a moment after slurmctld) is left out."""
    found: dict[int, Times] = {}
    for job in raw:
        time = job.get("time")
        job_id = job.get("job_id")
        if not isinstance(time, dict) or not isinstance(job_id, int):
            continue
        end = epoch(time.get("end"))
        if end is None:
            continue
        found[job_id] = (epoch(time.get("start")), end)
    return found
