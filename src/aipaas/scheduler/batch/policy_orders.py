"""The queue orders and job orders a profile can name (batch/policy.py's ``QueueOrder`` and
``JobOrder``); policy_registry.py registers them, batch/ordering.py and the actions use them
through ``Session.policy``.

Queue orders (``spec.batch.fairShare``):

- ``drf``: down the queue tree; at each level the child below its fair share in every
  resource it holds or is given goes first, then the higher sibling ``priority``, then the
  lower dominant share (the largest allocated / fair share over the resources the cluster
  measures), then the child created first. Fair shares: fairshare.py's ``drf_shares``.
- ``proportion`` (Volcano's proportion plugin): the leaves flat, by allocated GPU over fair
  share GPU, then priority and creation. Fair shares: ``proportion_shares``; no GPU slivers
  reclaimed (Volcano knows no GPU shares).
- ``fifo``: no queues in the order (one list of jobs) and no fair share limit.

Job orders (``spec.batch.jobOrder``): ``priority`` (higher first, then submission order) and
``fifo`` (submission order).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from aipaas.scheduler.batch.fairshare_tree import demand_shares, drf_shares, proportion_shares
from aipaas.scheduler.batch.model import Job
from aipaas.scheduler.batch.policy import JobEntry, NodeKey, SessionState, TreeShape

_INF: Final = float("inf")
_NO_SHARE: Final = (0, 0, 0, 0)


def _ratio(used: int, fair: int) -> float:
    if fair > 0:
        return used / fair
    return _INF if used > 0 else 0.0


class DominantShareOrder:
    """``drf``: the queue tree, by dominant share against the fair share."""

    name = "drf"
    shape = TreeShape.TREE
    limits_allocation = True
    reclaims_slivers = True
    fair_shares = staticmethod(drf_shares)

    def node_key(self, session: SessionState) -> Callable[[str], NodeKey]:
        allocated, queues = session.allocated, session.queues
        #: resources the cluster measures (a resource with no capacity has no share)
        measured = tuple(c > 0 for c in session.capacity.as_tuple())

        def key(node: str) -> NodeKey:
            held = allocated.get(node)
            share = session.fair_share.get(node)
            queue = queues.get(node)
            priority = queue.priority if queue is not None else 0
            created = queue.created if queue is not None else 0
            if held is None or share is None:
                below = share is not None and share.as_tuple() != _NO_SHARE
                return (0 if below else 1, -priority, 0.0, created)
            ratio, counted = 0.0, False
            for used, fair, counts in zip(held.as_tuple(), share.as_tuple(), measured, strict=True):
                if (used == 0 and fair == 0) or not counts:
                    continue
                counted = True  # a measured resource held or shared: the ratio says something
                r = _ratio(used, fair)
                if r > ratio:
                    ratio = r
            return (0 if ratio < 1.0 and counted else 1, -priority, ratio, created)

        return key


class ProportionOrder:
    """``proportion``: the leaves flat, by allocated GPU over fair share GPU."""

    name = "proportion"
    shape = TreeShape.LEAVES
    limits_allocation = True
    reclaims_slivers = False
    fair_shares = staticmethod(proportion_shares)

    def node_key(self, session: SessionState) -> Callable[[str], NodeKey]:
        allocated, queues = session.allocated, session.queues

        def key(node: str) -> NodeKey:
            held = allocated.get(node)
            share = session.fair_share.get(node)
            queue = queues.get(node)
            priority = queue.priority if queue is not None else 0
            created = queue.created if queue is not None else 0
            ratio = 0.0
            if held is not None and share is not None:
                ratio = _ratio(held.gpu_milli, share.gpu_milli)
            return (0, -priority, ratio, created)

        return key


def _unkeyed(node: str) -> NodeKey:
    return (0, 0, 0.0, 0)


class NoQueueOrder:
    """``fifo``: no queues in the order, no fair share."""

    name = "fifo"
    shape = TreeShape.NONE
    limits_allocation = False
    reclaims_slivers = False
    fair_shares = staticmethod(demand_shares)

    def node_key(self, session: SessionState) -> Callable[[str], NodeKey]:
        return _unkeyed  # no queue node is ever keyed


class PriorityJobOrder:
    """``priority``: higher priority first, then submission order."""

    name = "priority"
    runs_by_priority = True

    def key(self, job: Job) -> tuple[int, int]:
        return (-job.priority, job.order)

    def entries(self, jobs: Iterable[Job]) -> list[JobEntry]:
        return [(-job.priority, job.order, seq, job) for seq, job in enumerate(jobs)]


class SubmissionJobOrder:
    """``fifo``: submission order."""

    name = "fifo"
    runs_by_priority = True

    def key(self, job: Job) -> tuple[int, int]:
        return (0, job.order)

    def entries(self, jobs: Iterable[Job]) -> list[JobEntry]:
        return [(0, job.order, seq, job) for seq, job in enumerate(jobs)]
