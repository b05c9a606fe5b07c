"""Fair share for one cycle: what each leaf queue holds and asks for (``demands``) and every
queue node's fair share by the rule of the queue order the options name (``fair_shares``; the
rules themselves: fairshare_tree.py).

Who calls it: batch/run.py (``demands``; a session's fair shares come from its own queue
order), tests and what-if tools (``fair_shares``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.fairshare_tree import UNITS as UNITS
from aipaas.scheduler.batch.model import QueueNode, Resources
from aipaas.scheduler.batch.policy_registry import POLICIES

if TYPE_CHECKING:
    from aipaas.scheduler.batch.options import BatchOptions
    from aipaas.scheduler.batch.session import Session


def demands(session: Session) -> dict[str, Resources]:
    """Per leaf queue: what it holds plus what its jobs still ask for."""
    # Plain ints per queue (a Resources per task and job is the cost on long backlogs).
    from aipaas.scheduler.batch.session import job_total

    # A Session sums them as it takes in the snapshot (one walk over a backlog).
    sums: dict[str, list[int]] | None = getattr(session, "demand", None)
    if sums is None:
        sums = {}
        for job in session.jobs.values():
            total = sums.get(job.queue)
            if total is None:
                total = sums[job.queue] = [0, 0, 0, 0]
            for i, amount in enumerate(job_total(job)):
                total[i] += amount
    return {queue: Resources(*total) for queue, total in sums.items()}


def fair_shares(
    queues: Mapping[str, QueueNode],
    demand: Mapping[str, Resources],
    capacity: Resources,
    now: float,
    options: BatchOptions,
) -> dict[str, Resources]:
    """Every queue node's fair share, by the rule of the queue order ``options`` names."""
    order = POLICIES.queue_order(options.fairShare)
    return order.fair_shares(queues, demand, capacity, now, options.usageOverTime)
