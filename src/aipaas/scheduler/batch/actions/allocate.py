"""The allocate action: start what fits, in the session's order, without taking from anyone.

Three passes over the jobs the enqueue action let in (batch/ordering.py gives the order):

1. Gangs within fair share: a pending job starts only if every level of its queue stays within
   its quota and (unless ``fairShare: fifo``) at or below its fair share in each resource the
   gang asks for, after the start; then the whole gang (``min_available`` tasks) is placed
   (topology and backfill reservations restrict where) inside a Statement, or nothing is.
2. Elastic extras of running jobs (and of jobs just started), one task at a time, within quota
   and fair share; extras never borrow.
3. Borrowing: jobs refused only for fair share may use capacity still idle (within quotas).
   They are marked ``session.borrowed``: what reclaim takes back first.

With ``strictOrder`` the first job that cannot start stops every pass (strict FIFO). With
``holdForHead`` (default) a job that cannot start holds back the lower-priority jobs of its
queue in both passes (batch/head_hold.py).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.actions.enqueue import REFUSED
from aipaas.scheduler.batch.explain import unschedulable_message
from aipaas.scheduler.batch.head_hold import HeadHolds
from aipaas.scheduler.batch.model import UNBOUNDED, Job, Resources, Task
from aipaas.scheduler.batch.ordering import JobOrder, ordered
from aipaas.scheduler.batch.ordering_groups import GroupedOrder
from aipaas.scheduler.batch.session import gang_tasks, resources_of
from aipaas.scheduler.batch.topology import DomainView, Refusal, job_domain, place_in_domain
from aipaas.scheduler.framework.types import Placement, PodRequest, Unschedulable

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session

STARTED, QUOTA, FAIR_SHARE, NO_ROOM = "started", "quota", "fair share", "no room"


class Placer:
    """Places gangs and extras through the session's engine. Remembers gang shapes that found
    no room: until something is given back (``session.releases``) they cannot fit later either
    (a backlog of thousands of same-shaped jobs costs one placement attempt per shape)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._no_room: dict[tuple[object, ...], str] = {}
        self._domains = DomainView(session.engine)
        #: topology refusals by (shapes, level, required, cluster version)
        self._refused: dict[tuple[object, ...], Refusal] = {}

    def gang(self, job: Job, tasks: Sequence[Task]) -> list[Placement] | Refusal:
        allowed = self.session.reservations.allowed_nodes(job)
        pods = [task.request for task in tasks]
        label = job.topology_required or job.topology_preferred
        if label is not None:
            required = job.topology_required is not None
            version = len(self.session.account_log)
            shapes = self._key(pods, allowed)
            key = None if shapes is None else (shapes, label, required, version)
            if key is not None and key in self._refused:
                return self._refused[key]
            placed = place_in_domain(
                self.session.engine,
                pods,
                label,
                allowed,
                required=required,
                view=self._domains,
                version=version,
            )
            if key is not None and isinstance(placed, Refusal):
                self._refused[key] = placed
            return placed
        return self._place(pods, allowed)

    def extra(self, job: Job, task: Task) -> list[Placement] | Refusal:
        """One more task of a running job: inside the domain its tasks run in when it has a
        topology level (required: only there; preferred: there first)."""
        allowed = self.session.reservations.allowed_nodes(job)
        label = job.topology_required or job.topology_preferred
        if label is not None:
            domain = job_domain(self.session.engine, job, label)
            if domain is not None:
                nodes = [n for n in domain if allowed is None or n in allowed]
                placed = self._place([task.request], frozenset(nodes))
                if not isinstance(placed, Refusal) or job.topology_required is not None:
                    return placed
            elif job.topology_required is not None:
                return Refusal("Topology", "its running tasks are in no single domain")
        return self._place([task.request], allowed)

    def known_no_room(self, job: Job, tasks: Sequence[Task]) -> bool:
        """The gang's shape already found no room in this allocate (anywhere it may go)."""
        if job.topology_required or job.topology_preferred:
            return False
        allowed = self.session.reservations.allowed_nodes(job)
        key = self._key([t.request for t in tasks], allowed)
        return key is not None and key in self._no_room

    def _key(
        self, requests: Sequence[PodRequest], allowed: Collection[str] | None
    ) -> tuple[object, ...] | None:
        if any(p.claims for p in requests):
            return None  # devices are chosen by claim, not by shape
        shapes = tuple((*p.shape, p.memory_mib) for p in requests)
        # An engine whose answer depends on more than the shapes (the live controller's: a
        # job's nodeSelector, simulated nodes on request) says what, so that the memo never
        # answers for one job with another's refusal.
        constraint = getattr(self.session.engine, "constraint", None)
        extra = constraint(requests) if constraint is not None else None
        allowed_key = allowed if allowed is None else frozenset(allowed)
        return (shapes, allowed_key, self.session.releases, extra)

    def _place(
        self, requests: Sequence[PodRequest], allowed: Collection[str] | None
    ) -> list[Placement] | Refusal:
        key = self._key(requests, allowed)
        if key is not None:
            known = self._no_room.get(key)
            if known is not None:
                return Refusal("Unschedulable", known)
        result = self.session.engine.place(requests, nodes=allowed)
        if isinstance(result, Unschedulable):
            message = unschedulable_message(result, len(requests))
            if key is not None:
                self._no_room[key] = message
            return Refusal("Unschedulable", message)
        return result


class Limits:
    """Quota and fair-share checks, remembered per (queue, amount) until the next start: a
    backlog of same-shaped jobs in one queue costs one check (holdings only grow in allocate,
    and the memo is keyed by the session's count of changes, so it never answers stale)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._memo: dict[tuple[str, tuple[int, int, int, int], bool], str | None] = {}
        self._seen = -1

    def problem(self, job: Job, want: Resources, *, fair_share: bool) -> tuple[str, str] | None:
        session = self.session
        if self._seen != len(session.account_log):
            self._memo.clear()
            self._seen = len(session.account_log)
        quota_key = (job.queue, want.as_tuple(), False)
        if quota_key not in self._memo:
            self._memo[quota_key] = session.quota_problem(job, want)
        quota = self._memo[quota_key]
        if quota is not None:
            return ("QuotaExceeded", quota)
        if not fair_share:
            return None
        share_key = (job.queue, want.as_tuple(), True)
        if share_key not in self._memo:
            self._memo[share_key] = session.fair_share_problem(job, want)
        share = self._memo[share_key]
        return None if share is None else ("FairShare", share)


def start_gang(
    session: Session,
    placer: Placer,
    job: Job,
    *,
    fair_share: bool,
    borrowing: bool = False,
    limits: Limits | None = None,
    tasks: list[Task] | None = None,
    want: Resources | None = None,
) -> str:
    """Try to start the job's gang (``tasks``: its ``gang_tasks``, when known); say why not
    (``session.wait``) when it cannot. Returns STARTED, QUOTA, FAIR_SHARE or NO_ROOM.
    ``borrowing``: a job already told it waits for fair share keeps that reason when idle room
    is lacking too (and gets no reservation). ``limits``: a memo shared over many calls."""
    if tasks is None:
        tasks = gang_tasks(job)
    if limits is None:
        limits = Limits(session)
    if borrowing and placer.known_no_room(job, tasks):
        return NO_ROOM
    if want is None:
        want = resources_of(tasks)
    problem = limits.problem(job, want, fair_share=fair_share)
    if problem is not None:
        session.wait(job, *problem)
        if problem[0] == "QuotaExceeded":
            return QUOTA
        if not borrowing:
            # Reserved now, before later jobs of the pass start: where the share is all the
            # room there is (one busy queue), a gang above it waits for room in truth, and
            # without a reservation small jobs would start ahead of it forever. The
            # reservation starts when holdings fall within the share and room is there.
            session.reservations.reserve(job)
        return FAIR_SHARE
    placed = placer.gang(job, tasks)
    if isinstance(placed, Refusal):
        if not borrowing:
            session.wait(job, placed.reason, placed.message)
            session.reservations.reserve(job)
        return NO_ROOM
    statement = session.statement()
    for task, placement in zip(tasks, placed, strict=True):
        statement.allocate(job, task, placement)
    statement.commit()
    return STARTED


def start_extras(
    session: Session, placer: Placer, limits: Limits, job: Job, *, fair_share: bool
) -> int:
    """Start the job's pending tasks above its gang one by one while each fits within quota,
    fair share and the cluster; how many started."""
    started = 0
    for task in job.pending_tasks:
        if limits.problem(job, task.resources, fair_share=fair_share) is not None:
            break
        placed = placer.extra(job, task)
        if isinstance(placed, Refusal):
            break
        statement = session.statement()
        statement.allocate(job, task, placed[0])
        statement.commit()
        started += 1
    return started


def allocate(session: Session) -> None:
    placer = Placer(session)
    limits = Limits(session)
    fair_share = session.options.fairShare != "fifo"
    strict = session.options.strictOrder
    enqueued = session.enqueued
    gangs = dict(session.pending_gangs())
    if enqueued is not None and session.scratch.get(REFUSED) != 0:  # 0: it let every one in
        gangs = {k: g for k, g in gangs.items() if k in enqueued}
    holds = HeadHolds(session, lambda: _idle(session))
    deferred: list[Job] = []
    blocker: Job | None = None
    #: the last refusal for quota or fair share: (queue, request, count of changes, reason,
    #: outcome); the jobs after it in the same queue with the same request are refused alike
    #: while nothing changes (start_gang's memo would answer the same)
    refused: tuple[str, Resources, int, tuple[str, str], str] | None = None
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
            and refused[0] == job.queue
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
            refused = (job.queue, want, len(session.account_log), why, outcome)
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
    let in or kept out whole by enqueue: one verdict per group), else job by job."""
    book, enqueued = session.book, session.enqueued
    if book is None or session.account_log or session.options.fairShare == "fifo":
        jobs = session.jobs
        return ordered(session, [jobs[key] for key in gangs])
    runs = [
        (group.jobs, group.orders)
        for group in book.groups.values()
        if enqueued is None or group.jobs[0].key in enqueued
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
