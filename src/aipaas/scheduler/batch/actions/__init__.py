"""The actions of a cycle, by the name a profile gives them (batch/options.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.actions.allocate import allocate
from aipaas.scheduler.batch.actions.backfill import backfill
from aipaas.scheduler.batch.actions.enqueue import enqueue
from aipaas.scheduler.batch.actions.preempt import preempt
from aipaas.scheduler.batch.actions.reclaim import reclaim

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session

ACTIONS: dict[str, Callable[[Session], None]] = {
    "enqueue": enqueue,
    "allocate": allocate,
    "preempt": preempt,
    "reclaim": reclaim,
    "backfill": backfill,
}
