"""Fair share over the queue tree (placeholder: its owner replaces this file)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.model import QueueNode, Resources
from aipaas.scheduler.batch.options import BatchOptions

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session


def demands(session: Session) -> dict[str, Resources]:
    """Per leaf queue: what it holds plus what its jobs still ask for."""
    out: dict[str, Resources] = {}
    for job in session.jobs.values():
        want = Resources()
        for task in job.tasks:
            want = want + task.resources
        out[job.queue] = out.get(job.queue, Resources()) + want
    return out


def fair_shares(
    queues: Mapping[str, QueueNode],
    demand: Mapping[str, Resources],
    capacity: Resources,
    now: float,
    options: BatchOptions,
) -> dict[str, Resources]:
    """Every queue node's fair share (placeholder: its demand)."""
    return {key: demand.get(key, Resources()) for key in queues}
