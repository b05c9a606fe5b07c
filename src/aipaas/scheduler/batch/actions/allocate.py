"""The allocate action: start what fits, in the session's order, without taking from anyone.

Three passes over the jobs the enqueue action let in (batch/ordering.py gives the order):

1. Gangs within fair share: a pending job starts only if every level of its queue stays within
   its quota and (where the queue order limits allocation: not ``fifo``) at or below its fair
   share in each resource the gang asks for, after the start; then the whole gang
   (``min_available`` tasks) is placed (topology and backfill reservations restrict where)
   inside a Statement, or nothing is.
2. Elastic extras of running jobs (and of jobs just started), one task at a time, within quota
   and fair share; extras never borrow.
3. Borrowing: jobs refused only for fair share may use capacity still idle (within quotas).
   They are marked ``session.borrowed``: what reclaim takes back first.

With ``strictOrder`` the first job that cannot start stops every pass (strict FIFO). With
``holdForHead`` (default) a job that cannot start holds back the lower-priority jobs of its
queue in both passes (batch/head_hold.py). Starting one gang or extra: actions/starting.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aipaas.scheduler.batch.actions.starting import FAIR_SHARE as FAIR_SHARE
from aipaas.scheduler.batch.actions.starting import NO_ROOM as NO_ROOM
from aipaas.scheduler.batch.actions.starting import QUOTA as QUOTA
from aipaas.scheduler.batch.actions.starting import STARTED as STARTED
from aipaas.scheduler.batch.actions.starting import Limits as Limits
from aipaas.scheduler.batch.actions.starting import Placer as Placer
from aipaas.scheduler.batch.actions.starting import start_extras as start_extras
from aipaas.scheduler.batch.actions.starting import start_gang as start_gang
from aipaas.scheduler.batch.head_hold import HeadHolds
from aipaas.scheduler.batch.model import UNBOUNDED, Job, Resources, Task
from aipaas.scheduler.batch.ordering import JobOrder, ordered
from aipaas.scheduler.batch.ordering_groups import GroupedOrder
from aipaas.scheduler.batch.policy import TreeShape
from aipaas.scheduler.batch.session import gang_tasks

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session


def allocate(session: Session) -> None:
    placer = Placer(session)
    limits = Limits(session)
    fair_share = session.policy.queue_order.limits_allocation
    strict = session.options.strictOrder
    enqueued = session.enqueued
    gangs = dict(session.pending_gangs())
    if enqueued is not None and session.memos.refused != 0:  # 0: it let every one in
        gangs = {k: g for k, g in gangs.items() if k in enqueued}
    holds = HeadHolds(session, lambda: _idle(session))
    deferred: list[Job] = []
    blocker: Job | None = None
    #: the last refusal for quota or fair share: (queue, request, count of changes, reason,
    #: outcome); the jobs after it in the same queue with the same request are refused alike
    #: while nothing changes (start_gang's memo would answer the same)
    refused: tuple[tuple[str, str], Resources, int, tuple[str, str], str] | None = None
    order = _order(session, gangs)
    for job in order:
        if blocker is not None:
            _behind(session, job, blocker)
            continue
        tasks, want = gangs[job.key]
        head = holds.holding(job)
        if head is not None:
            # The rest of its queue comes after it (priority order): lower still, held too.
            for held in [job, *order.drain(job.queue)]:
                holds.wait(held, head)
                deferred.append(held)  # it may borrow what is idle beyond the heads' part
            continue
        if (
            refused is not None
            and refused[0] == (job.queue, job.user)
            and refused[2] == len(session.account_log)
            and refused[1] == want
            # a fair-share refusal also asks for a reservation: skipped only where none
            # could be made
            and (refused[4] == QUOTA or session.reservations.gives_none(job))
        ):
            session.wait(job, *refused[3])
            if refused[4] == FAIR_SHARE:
                deferred.append(job)
            holds.refused(job, want)
            continue
        outcome = start_gang(
            session,
            placer,
            job,
            fair_share=fair_share,
            limits=limits,
            tasks=tasks,
            want=want,
        )
        if outcome in (QUOTA, FAIR_SHARE) and not strict:
            why = session.waiting[job.key]
            refused = ((job.queue, job.user), want, len(session.account_log), why, outcome)
        if outcome == FAIR_SHARE:
            deferred.append(job)
        if outcome != STARTED:
            holds.refused(job, want)
            if strict:
                blocker = job
            elif outcome in (QUOTA, FAIR_SHARE) and refused is not None:  # its own refusal
                # The jobs right behind it in its queue with its priority and request fare
                # as the memo above makes them fare, one by one, with nothing changing
                # between (its head hold, if any, is theirs: equal priority is not held):
                # they are passed over at once (a backlog of thousands per queue).
                _refuse_alike(session, order, job, gangs, refused[3], refused[4], deferred)
    if blocker is None and session.multi_task:
        growing = [  # running jobs with tasks above their gang (a lone task has none)
            j
            for j in session.jobs.values()
            if len(j.tasks) > 1
            and j.is_running
            and j.pending_tasks
            and not gang_tasks(j)
            and session.considered(j)
        ]
        for job in ordered(session, growing):
            start_extras(session, placer, limits, job, fair_share=fair_share)
    # Borrowing uses only what is idle: a gang larger than all of it together is not tried
    # (it keeps its fair-share reason); a cheap test that spares long backlogs on a full cluster.
    idle = _idle(session) if deferred else Resources()
    if not strict:  # in strict order the first that cannot start must stop the pass
        # (a head may use its own part of what is set aside; no other job may)
        beyond = idle - holds.aside
        deferred = [
            j
            for j in deferred
            if gangs[j.key][1].fits_within(beyond)
            or (holds.is_head(j) and gangs[j.key][1].fits_within(idle))
        ]
    for job in ordered(session, deferred):
        tasks, want = gangs[job.key]
        # What waiting heads ask for is set aside (a counter, not a placement): borrowers
        # take only what is idle beyond it; a head may use its own part.
        if not want.fits_within(idle - holds.set_aside(job)):
            if strict:
                break
            continue
        outcome = start_gang(
            session,
            placer,
            job,
            fair_share=False,
            borrowing=True,
            limits=limits,
            tasks=tasks,
            want=want,
        )
        if outcome == STARTED:
            session.borrowed.add(job.key)
            holds.started(job)
            idle = idle - want
        elif strict:
            break


def _order(session: Session, gangs: dict[str, tuple[list[Task], Resources]]) -> JobOrder:
    """The order of the first pass over ``gangs`` (the jobs let in): by the groups of the
    caller's backlog book where the session has one and nothing changed yet (each group was
    let in or kept out whole by enqueue: one verdict per group), else job by job. Groups
    need queues in the order and a job order that keeps a leaf's jobs of one priority in
    submission order."""
    book, enqueued = session.book, session.enqueued
    policy = session.policy
    if (
        book is None
        or session.account_log
        or policy.queue_order.shape is TreeShape.NONE
        or not policy.job_order.runs_by_priority
    ):
        jobs = session.jobs
        return ordered(session, [jobs[key] for key in gangs])
    stopped = session.stopped  # a group is one leaf: held whole or not at all
    runs = [
        (group.jobs, group.orders)
        for group in book.groups.values()
        if (enqueued is None or group.jobs[0].key in enqueued)
        and not (stopped and group.jobs[0].key in stopped)
    ]
    singles = [job for key, job in book.others.items() if key in gangs]
    return GroupedOrder(session, runs, singles)


def _refuse_alike(
    session: Session,
    order: JobOrder,
    job: Job,
    gangs: dict[str, tuple[list[Task], Resources]],
    why: tuple[str, str],
    outcome: str,
    deferred: list[Job],
) -> None:
    """Refuse, as ``job`` just was, the jobs that come next in its queue with its priority
    and gang request (a fair-share refusal only where no reservation could be made)."""
    if outcome == FAIR_SHARE and not session.reservations.gives_none(job):
        return
    # Same kind: the same gang request (and shapes), as told by identity.
    alike = order.take_alike(job, priority=True, level=False)
    if not alike:
        return
    session.waiting.update(dict.fromkeys([j.key for j in alike], why))
    if outcome == FAIR_SHARE:
        deferred.extend(alike)


def _idle(session: Session) -> Resources:
    """Free capacity over all nodes (GPU memory unbounded: engines do not measure it)."""
    gpu = cpu = memory = 0
    for node in session.engine.nodes:
        free = session.engine.free(node.name)
        gpu += free.gpu_milli
        cpu += free.cpu_milli
        memory += free.memory_mib
    return Resources(gpu, cpu, memory, UNBOUNDED)


def _behind(session: Session, job: Job, blocker: Job) -> None:
    why = session.waiting.get(blocker.key, ("", "it cannot start"))[1]
    session.wait(job, "StrictOrder", f"behind {blocker.key} in strict order ({why})")
