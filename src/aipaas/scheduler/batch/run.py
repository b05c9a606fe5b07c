"""One batch scheduling cycle: a ``Session`` over a snapshot, its fair shares, the profile's
actions in order, NoExecute taints last, then why each job waits and the queues' report.

Pure, as the whole scheduler: snapshot in, decisions out. The actions import the session
(they work on it); the session imports no action, and this module imports both, so the
package has no import circle (tests/unit/controller/test_core_import_graph.py).

Who calls it: controller/batch_cycle.py (the live cycle), sim/scenario_run.py and
sim/scenario_output.py (``aipaas simulate``), and tests of the actions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.actions import ACTIONS
from aipaas.scheduler.batch.actions.taint_eviction import evict_untolerated
from aipaas.scheduler.batch.cluster import PlacementEngine
from aipaas.scheduler.batch.fairshare import demands
from aipaas.scheduler.batch.model import Decisions, Job, Snapshot
from aipaas.scheduler.batch.options import BatchOptions
from aipaas.scheduler.batch.session import Session

if TYPE_CHECKING:
    from aipaas.scheduler.batch.backlog_book import BacklogBook


def run_session(
    snapshot: Snapshot,
    engine: PlacementEngine,
    options: BatchOptions | None = None,
    *,
    book: BacklogBook | None = None,
) -> Decisions:
    """One cycle: what the live controller and ``aipaas simulate`` call (``book``: the
    snapshot's jobs as the caller keeps them across cycles, batch/backlog_book.py)."""
    return decide(Session(snapshot, engine, options, book=book))


def decide(session: Session) -> Decisions:
    """Fair shares (by the session's queue order), then each action of the profile in order;
    then the report."""
    if session.given_fair_share is not None:
        session.fair_share = dict(session.given_fair_share)
    else:
        session.fair_share = session.policy.queue_order.fair_shares(
            session.queues,
            demands(session),
            session.capacity,
            session.now,
            session.options.usageOverTime,
        )
    for name in session.options.actions:
        ACTIONS[name](session)
    # NoExecute taints last: their victims stop before anything uses the room (as
    # preemption's do), and no action of this cycle starts them again.
    evict_untolerated(session)
    session.waiting.update(session.stopped)  # the hold is why they wait, whatever else was said
    decisions = session.decisions
    started = {s.job for s in decisions.started}
    waiting, reasons, gangs = session.waiting, decisions.reasons, session.gangs_waiting()
    walked: Iterable[tuple[str, Job]] = session.jobs.items()
    book = session.book
    if book is not None:
        # The book's idle jobs were waiting whole when the cycle began, and only a start
        # changes that (what preempt and reclaim take ran before the cycle): each one not
        # started has its gang still to start. Set operations, not a walk; the reasons
        # come in another order than the jobs' (they are looked up by key).
        idle = waiting.keys() & book.idle.keys()
        idle -= started
        reasons.update({key: waiting[key] for key in idle})
        walked = book.others.items()
    for key, job in walked:
        why = waiting.get(key)
        if why is None or key in started:
            continue
        # A job with a gang to start has pending tasks (most of them: no walk).
        if key in gangs or any(t.placement is None for t in job.tasks):
            reasons[key] = why
    decisions.reservations.update(session.reservations.held)
    decisions.queues = session.report()
    return decisions
