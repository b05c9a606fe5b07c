"""The admission and victim order a session uses (batch/policy.py's ``Admission`` and
``VictimOrder``); policy_registry.py registers them. ``Session.quota_problem`` asks the
admission; preempt, reclaim and slivers ask the victim order for their eviction steps, and
victim_search.py for the second order it tries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from aipaas.scheduler.batch.explain import quota_message, user_quota_message
from aipaas.scheduler.batch.model import Job, Resources
from aipaas.scheduler.batch.policy import SessionState
from aipaas.scheduler.batch.victim_units import Unit, biggest_first, units_of


class QuotaAdmission:
    """``quota``: every queue node of the job's lineage (the root aside) and its user stay
    within their quotas, counting what is held, what DRA claims were given in this cycle and
    what is being evicted (``Session.claimed``)."""

    name = "quota"

    def problem(self, session: SessionState, job: Job, extra: Resources) -> str | None:
        """Words naming the first queue node (leaf upward), then the user, whose quota
        ``extra`` more of ``job`` would break; None when every level has room."""
        claimed = session.claimed
        for key in session.lineage(job.queue):
            queue = session.queues.get(key)
            if queue is None or key == "":
                continue
            held = session.allocated[key]
            if claimed:
                held = held + claimed.get(key, Resources())
            if not (held + extra).fits_within(queue.quota):
                return quota_message(key, queue, held, extra)
        if job.user and session.users:
            limit = session.users.get(job.user)
            if limit is not None:
                held = session.user_allocated[job.user]
                if claimed:
                    held = held + claimed.get("@" + job.user, Resources())
                if not (held + extra).fits_within(limit):
                    return user_quota_message(job.user, limit, held, extra)
        return None


class LowestPriorityNewestFirst:
    """``lowest-priority-newest``: elastic extras before whole jobs; each by lowest priority,
    then most recently started (victim_units.py's ``units_of``); the second order takes whole jobs
    of equal priority biggest first (``biggest_first``)."""

    name = "lowest-priority-newest"

    def units(self, jobs: Iterable[Job]) -> list[Unit]:
        return units_of(jobs)

    def second(self, units: Sequence[Unit]) -> list[Unit]:
        return biggest_first(units)
