"""Starting one gang (or one elastic extra) within quota and fair share: what the allocate
action does per job, and backfill after it. ``Placer`` places through the session's engine
(remembering shapes that found no room until something is given back), ``Limits`` checks
quota and fair share (remembered per queue and amount until the next start), ``start_gang``
and ``start_extras`` try and say why not."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.explain import unschedulable_message
from aipaas.scheduler.batch.model import Job, Resources, Task
from aipaas.scheduler.batch.session import gang_tasks, resources_of
from aipaas.scheduler.batch.statement import claims_over_quota
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
        shapes = tuple(p.fit_key for p in requests)
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
        #: by (queue, user, amount, fair share or quota): a user's quota makes two users'
        #: jobs of one queue fare differently
        self._memo: dict[tuple[str, str, tuple[int, int, int, int], bool], str | None] = {}
        self._seen = -1

    def problem(self, job: Job, want: Resources, *, fair_share: bool) -> tuple[str, str] | None:
        session = self.session
        if self._seen != len(session.account_log):
            self._memo.clear()
            self._seen = len(session.account_log)
        quota_key = (job.queue, job.user, want.as_tuple(), False)
        if quota_key not in self._memo:
            self._memo[quota_key] = session.quota_problem(job, want)
        quota = self._memo[quota_key]
        if quota is not None:
            return ("QuotaExceeded", quota)
        if not fair_share:
            return None
        share_key = (job.queue, job.user, want.as_tuple(), True)
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
    over = claims_over_quota(statement, job, tasks)
    if over is not None:
        session.wait(job, "QuotaExceeded", over)
        return QUOTA
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
        if claims_over_quota(statement, job, [task]) is not None:
            break
        statement.commit()
        started += 1
    return started
