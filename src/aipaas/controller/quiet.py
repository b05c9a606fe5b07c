"""What a cycle keeps for the next, so that a cycle with nothing new reads and places nothing.

With ten thousand jobs waiting and a thousand running, a cycle in which nothing changed still
listed every job and task record, built a Placer holding every running task and walked every
job for its status: most of its time. The cycle now keeps, at its end:

- its jobs and their task records (``JobWork`` items, as left after the write-back: durable),
  used again by the next cycle when the store's mark of ``Job`` (store.py ``kind_marks``:
  count, largest row id, newest creation time, sum of resourceVersions) is the one read before
  this cycle listed them, and the lease's fencing token is the same. Every write to a job, by
  this process, another server or the API, changes the mark; task records are written only by
  the lease holder (this controller: its own writes are in the items it keeps) and, outside the
  cycle, by the deletion of their job (a change of the mark). A new token (the lease lost and
  taken again: another controller may have written in between) lists again. So does a cycle
  whose batch session is due (time decides: backoffs, minRuntime, reservations, the recheck),
  and one at least every ``FRESH_SECONDS`` (what no mark can tell: see ``kind_marks``).
- its placement (the Placer and what it holds), when the cycle changed nothing at all (no task
  record, status, event or reason: the batch session did not run and nothing was held anew or
  given up). The next cycle uses it again, and skips the write-back, when it too changed
  nothing before placing, reads the same jobs and records, and the marks of every kind
  placement reads (tenants, queues, users, DRA claims, slices and classes) are the same, the
  node inventory has not changed, no job names DRA claims or datasets (their state lives
  in objects placement reads beyond these), and the session is not due.

Who calls it: controller/cycle.py ``Controller._run_cycle``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aipaas.api.job import Job
from aipaas.controller.placement import Placer
from aipaas.controller.work import JobFacts, JobWork

#: the kinds whose marks a kept placement depends on (``Job`` first: the listing's)
WATCHED_KINDS = (
    "Job",
    "Tenant",
    "Queue",
    "User",
    "ResourceClaim",
    "ResourceSlice",
    "DeviceClass",
    "DeviceTaintRule",  # a rule added or deleted changes which devices take new work
)
#: a cycle lists the jobs again at least this often, whatever the marks say
FRESH_SECONDS = 5.0

Marks = dict[str, tuple[object, ...]]


@dataclass
class Kept:
    """One cycle's jobs (and placement, when it changed nothing), and what they depend on."""

    marks: Marks
    token: int | None
    inventory: int
    listed_at: float
    work: list[JobWork]
    placer: Placer | None = None
    #: indices in ``work`` of the items the cycle did not leave clean (made anew when used)
    unclean: Sequence[int] = ()
    #: a job names DRA claims or datasets (its placement reads more than the marks tell)
    special: bool = False


class QuietCycles:
    """The last completed cycle's ``Kept``; taken (and so dropped) by the next cycle, which
    keeps its own only when it completes: a cycle ended by an error leaves nothing kept."""

    def __init__(self) -> None:
        self._kept: Kept | None = None
        self._prior: Kept | None = None
        #: cycles that used the last one's jobs, and its placement (tests and benchmarks)
        self.reused_jobs = 0
        self.reused_placements = 0
        self.reused_records = 0

    def take(
        self, marks: Marks, token: int | None, inventory: int, now: float, session_due: bool
    ) -> Kept | None:
        """The last cycle's ``Kept`` when its jobs may be used again (its placement left in it
        only when that may be used again too, given a cycle that changes nothing before
        placing); None: list and place anew."""
        kept, self._kept = self._kept, None
        # Its records stay the store's whatever was written to jobs: only the lease holder
        # writes records (a deleted job's go with it, and a new job has none yet).
        fresh = kept is not None and kept.token == token and now - kept.listed_at < FRESH_SECONDS
        self._prior = kept if fresh else None
        if (
            kept is None
            or session_due
            or kept.token != token
            or kept.marks.get("Job") != marks.get("Job")
            or now - kept.listed_at >= FRESH_SECONDS
        ):
            return None
        if kept.placer is not None and (
            kept.marks != marks or kept.inventory != inventory or kept.special
        ):
            kept.placer = None
        if kept.unclean:
            kept.work = list(kept.work)
            for index in kept.unclean:
                kept.work[index] = _fresh(kept.work[index])
            kept.unclean = ()
        self.reused_jobs += 1
        self._prior = None
        return kept

    def records_kept(self) -> dict[str, JobWork] | None:
        """After a ``take`` that gave nothing: the last cycle's items by job uid, whose task
        records are the store's (same lease token, listed less than ``FRESH_SECONDS`` ago),
        so that a cycle listing its jobs again need not read the records; None: read them."""
        prior, self._prior = self._prior, None
        if prior is None:
            return None
        self.reused_records += 1
        return {item.facts.uid: item for item in prior.work}

    def keep(self, kept: Kept) -> None:
        self._kept = kept


def clean(item: JobWork) -> bool:
    """Whether the cycle left ``item`` as it found it (nothing to write, nothing decided)."""
    return not (
        item.changed
        or item.touched
        or item.events
        or item.reason
        or item.message
        or item.ending
        or item.phase is not None
    )


def all_clean(work: Sequence[JobWork]) -> bool:
    return all(map(clean, work))


def unclean(work: Sequence[JobWork]) -> list[int]:
    return [index for index, item in enumerate(work) if not clean(item)]


def special(work: Sequence[JobWork]) -> bool:
    """Whether a job names DRA claims or datasets (see the module docstring)."""
    return any(item.facts.claims or item.facts.datasets for item in work)


def _fresh(item: JobWork) -> JobWork:
    return JobWork(item.job, list(item.records), known=item.facts)


def item_for(job: Job, facts: JobFacts, prior: JobWork | None) -> JobWork:
    """The cycle's item of a job listed again, with the records ``records_kept`` gave (none:
    a job new since the last cycle); the last cycle's item itself when it is of this very
    job model and was left clean."""
    if prior is None:
        return JobWork(job, [], known=facts)
    if prior.job is job and clean(prior):
        return prior
    return JobWork(job, list(prior.records), known=facts)
