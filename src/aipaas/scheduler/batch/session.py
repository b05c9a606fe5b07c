"""A session: one scheduling cycle over one snapshot, the profile's actions in order.

The session's fair shares are computed once per cycle by its queue order (batch/run.py; or
taken from the caller); it keeps what each queue (and every ancestor) holds as actions change
it (``account``, which also logs the queue so that orderings re-key it), and collects the
decisions. Actions are functions ``(Session) -> None`` registered by name in
``batch/actions/__init__.py``; they change the snapshot only through a ``Statement``. A cycle
is run by ``batch/run.py`` (``run_session``), which imports the actions: the session imports
none of them, so nothing here imports back what imports it.

Its policy (``policy``: queue order, job order, admission, victim order; batch/policy.py) is
what the options name, resolved through the registry (batch/policy_registry.py), or what the
caller gives. What actions share through it: ``quota_problem`` (the admission's words) and
``fair_share_problem`` (words, or None), ``pending_gangs`` (each waiting gang and its size,
kept until something changes), ``enqueued``/``considered`` (what enqueue let in),
``borrowed`` (jobs started above their share: reclaim's first prey), ``wait`` (why a job
waits), ``reservations`` (backfill) and ``memos`` (``CycleMemos``: what the actions remember
within the cycle and hand one another).

A caller that keeps its jobs from cycle to cycle (the simulator) may give a ``BacklogBook``
(batch/backlog_book.py): the waiting backlog is then taken from it, grouped, instead of walked
job by job; the decisions are the same.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.cluster import PlacementEngine
from aipaas.scheduler.batch.gangs import gang_entry as gang_entry
from aipaas.scheduler.batch.gangs import gang_kind as gang_kind
from aipaas.scheduler.batch.gangs import gang_shape as gang_shape
from aipaas.scheduler.batch.gangs import gang_tasks as gang_tasks
from aipaas.scheduler.batch.gangs import job_total as job_total
from aipaas.scheduler.batch.gangs import resources_of as resources_of
from aipaas.scheduler.batch.gangs import verdict_shape as verdict_shape
from aipaas.scheduler.batch.model import (
    Decisions,
    Job,
    QueueNode,
    QueueReport,
    Resources,
    Snapshot,
    Task,
)
from aipaas.scheduler.batch.options import BatchOptions
from aipaas.scheduler.batch.policy import SessionPolicy
from aipaas.scheduler.batch.policy_registry import session_policy
from aipaas.scheduler.batch.reservations import Reservations
from aipaas.scheduler.batch.statement import Statement

if TYPE_CHECKING:
    from aipaas.scheduler.batch.backlog_book import BacklogBook


@dataclass
class CycleMemos:
    """What the actions remember within one cycle, each field named for who writes and who
    reads it (a typed record, not a dict of names)."""

    #: enqueue: how many jobs with a gang to start it kept out (None: enqueue did not run);
    #: allocate reads it (0: every such job was let in, no filter needed)
    refused: int | None = None
    #: enqueue: whether some node could hold a pod of this shape (backlogs repeat shapes)
    fits: dict[tuple[object, ...], bool] = field(default_factory=dict)
    #: head holds (head_hold.py): each held job's head (job key -> head's key); backfill
    #: reads it (a job whose head has started since is held no longer)
    held_by: dict[str, str] = field(default_factory=dict)
    #: victims.py: the nodes of each topology domain, by the level's label
    domains: dict[str, list[frozenset[str]]] = field(default_factory=dict)


class Session:
    """The state of one cycle. Running tasks of the snapshot must already be held in
    ``engine`` (the caller builds it with them)."""

    def __init__(
        self,
        snapshot: Snapshot,
        engine: PlacementEngine,
        options: BatchOptions | None = None,
        *,
        fair_share: Mapping[str, Resources] | None = None,
        book: BacklogBook | None = None,
        policy: SessionPolicy | None = None,
    ) -> None:
        self.snapshot = snapshot
        #: the snapshot's jobs as kept across cycles by the caller (None: walk them all)
        self.book = book
        self.engine = engine
        self.options = options or BatchOptions()
        #: the orders, admission and victim order of the cycle (what the options name)
        self.policy = (
            policy
            if policy is not None
            else session_policy(self.options.fairShare, self.options.jobOrder)
        )
        self.now = snapshot.now
        self.queues: dict[str, QueueNode] = snapshot.queues
        self._lineages: dict[str, tuple[str, ...]] = {}
        if book is None:
            self.jobs: dict[str, Job] = {j.key: j for j in snapshot.jobs}
        elif list(book.jobs.values()) == snapshot.jobs:  # the same objects: no field compared
            self.jobs = dict(book.jobs)
        else:
            raise ValueError("the backlog book does not hold the snapshot's jobs")
        self.decisions = Decisions()
        self.children: dict[str, list[str]] = defaultdict(list)
        for key, queue in sorted(self.queues.items(), key=lambda kv: kv[1].created):
            if queue.parent is not None:
                self.children[queue.parent].append(key)
        #: what each queue node holds now (leaf and every ancestor), changed by ``account``
        self.allocated: dict[str, Resources] = defaultdict(Resources)
        #: per job with a gang to start: its ``gang_tasks`` and what they ask for (kept up to
        #: date by ``account``: a start or an eviction changes only its own job's gang)
        self._gangs: dict[str, tuple[list[Task], Resources]] = {}
        #: a gang came back (an eviction) since ``_gangs`` was last in the jobs' order
        self._gangs_reordered = False
        #: the jobs running when the cycle began (in the snapshot's order): the only ones
        #: preempt and reclaim may take (what starts in the cycle is not taken in it)
        self.running: list[Job] = []
        #: some job has more than one task (else no job has elastic extras to start)
        self.multi_task = False
        #: per leaf queue: what its jobs hold and ask for (``fairshare.demands``), and what
        #: its pending tasks ask for (kept up to date by ``account``: the report's pending),
        #: as [gpu, cpu, memory, GPU memory] (one walk over a backlog, not one per use)
        self.demand: dict[str, list[int]] = {}
        self._pending: dict[str, list[int]] = {}
        demand, pending = self.demand, self._pending
        gangs = self._gangs
        walked: Iterable[Job] = snapshot.jobs
        if book is not None:
            # The idle part as the book keeps it; only the rest (running jobs mostly) walked.
            if len(book) != len(snapshot.jobs):
                raise ValueError("the backlog book does not hold the snapshot's jobs")
            gangs.update(book.entries)
            for leaf, sums in book.sums.items():
                demand[leaf] = list(sums)
                pending[leaf] = list(sums)
            rank = book.rank
            walked = sorted(book.others.values(), key=lambda j: rank[j.key])
        for job in walked:
            total = job._total
            if total is None:
                total = job_total(job)
            tasks = job.tasks
            cached = job._idle_gang
            if (
                cached is not None
                and len(tasks) == 1
                and tasks[0].placement is None
                and cached[0] == job.min_available
                and cached[1][0]
            ):
                # The common case inline (a waiting one-task job seen before): what
                # ``gang_entry`` would say, without the calls.
                gangs[job.key] = cached[1]
                waits = pending.get(job.queue)
                if waits is None:
                    demand[job.queue] = list(total)
                    pending[job.queue] = list(total)
                    continue
                sums = demand[job.queue]
                sums[0] += total[0]
                sums[1] += total[1]
                sums[2] += total[2]
                sums[3] += total[3]
                waits[0] += total[0]
                waits[1] += total[1]
                waits[2] += total[2]
                waits[3] += total[3]
                continue
            if len(tasks) > 1:
                self.multi_task = True
            found = demand.get(job.queue)
            if found is None:
                sums = demand[job.queue] = [0, 0, 0, 0]
                pending[job.queue] = [0, 0, 0, 0]
            else:
                sums = found
            sums[0] += total[0]
            sums[1] += total[1]
            sums[2] += total[2]
            sums[3] += total[3]
            entry = gang_entry(job)
            if entry is not None:
                self._gangs[job.key] = entry
                if len(job.tasks) == len(entry[0]):
                    waits = pending[job.queue]  # nothing of it runs (most of a backlog)
                    waits[0] += total[0]
                    waits[1] += total[1]
                    waits[2] += total[2]
                    waits[3] += total[3]
                    continue  # holds nothing
            idle = [t for t in job.tasks if t.placement is None]
            if idle:
                r = resources_of(idle)
                waits = pending[job.queue]
                waits[0] += r.gpu_milli
                waits[1] += r.cpu_milli
                waits[2] += r.memory_mib
                waits[3] += r.gpu_memory_mib
            if len(idle) == len(job.tasks):
                continue  # runs nothing
            self.running.append(job)
            used = job.allocated()
            if used != Resources():
                for key in self.lineage(job.queue):
                    self.allocated[key] = self.allocated[key] + used
        #: per-user quotas: what each user with a quota holds now (kept by ``account``)
        self.users: Mapping[str, Resources] = snapshot.users
        self.user_allocated: dict[str, Resources] = defaultdict(Resources)
        if self.users:
            for job in self.running:
                if job.user in self.users:
                    self.user_allocated[job.user] += job.allocated()
        #: jobs in a queue whose admission is stopped (a hold on it or an ancestor): they start
        #: nothing in this cycle, whatever the actions find (admission on the queue tree)
        self.stopped: dict[str, tuple[str, str]] = self._stopped()
        self.capacity = engine.capacity()
        #: fair share of every queue node, computed once per cycle from the demand that exists
        #: fair shares given by the caller (tests, what-if tools): used instead of computing
        self.given_fair_share = None if fair_share is None else dict(fair_share)
        self.fair_share: dict[str, Resources] = dict(self.given_fair_share or {})
        #: per job: the message of the last action that looked at it and let it wait
        self.waiting: dict[str, tuple[str, str]] = {}
        #: backfill reservations (EASY): allocate asks them where a job may start now
        self.reservations = Reservations(self)
        #: the leaf of every ``account`` call, in order: orderings re-key what changed
        self.account_log: list[str] = []
        #: how many times ``account`` gave something back (an eviction, a discarded start):
        #: "no room" found before stays true until this changes
        self.releases = 0
        #: jobs the enqueue action let into consideration (None: no enqueue ran, all may)
        self.enqueued: set[str] | None = None
        #: jobs started beyond their queue's fair share (the borrowing pass): reclaim does not
        #: count what they hold above a share in this cycle (actions/reclaim_rules.py)
        self.borrowed: set[str] = set()
        #: what the actions remember within the cycle, and hand one another
        self.memos = CycleMemos()
        #: nodes where a task was evicted in this cycle (committed): starts there are pipelined
        self.freed_nodes: set[str] = set()
        #: what counts against quotas (``quota_problem``) besides ``allocated``, by queue node
        #: and by "@user": the GPUs DRA claims were given to tasks started in this cycle (known
        #: once the devices are chosen; fair shares see them from the next cycle on, as the
        #: tasks' own resources) and tasks evicted in this cycle (they hold what they have
        #: until their stop is confirmed)
        self.claimed: dict[str, Resources] = {}
        for key, why in self.stopped.items():
            self.waiting[key] = why

    def _stopped(self) -> dict[str, tuple[str, str]]:
        """Jobs below a held queue node, with the words of the nearest hold; their gangs are
        taken out of the pending ones (no action sees them)."""
        if not any(q.hold for q in self.queues.values()):
            return {}
        stopped: dict[str, tuple[str, str]] = {}
        for job in self.jobs.values():
            hold = next((self.queues[k].hold for k in self.lineage(job.queue)
                         if k in self.queues and self.queues[k].hold), "")  # fmt: skip
            if hold:
                stopped[job.key] = ("AdmissionStopped", hold)
                self._gangs.pop(job.key, None)
        return stopped

    # --- the tree -------------------------------------------------------------------

    def lineage(self, key: str) -> tuple[str, ...]:
        """The queue node and its ancestors up to the root ("") (worked out once per key:
        the tree does not change within a cycle, and every check walks it)."""
        found = self._lineages.get(key)
        if found is None:
            path = []
            current: str | None = key
            while current is not None:
                path.append(current)
                queue = self.queues.get(current)
                current = queue.parent if queue is not None else None
            found = self._lineages[key] = tuple(path)
        return found

    def is_leaf(self, key: str) -> bool:
        return not self.children.get(key)

    def account(self, job: Job, amount: Resources, sign: int = 1) -> None:
        """Add (or, with ``sign`` -1, take away) ``amount`` on the job's queue and ancestors."""
        delta = amount if sign > 0 else Resources() - amount
        for key in self.lineage(job.queue):
            self.allocated[key] = self.allocated[key] + delta
        self.account_log.append(job.queue)
        if sign < 0:
            self.releases += 1
        waits = self._pending.get(job.queue)
        if waits is None:
            waits = self._pending[job.queue] = [0, 0, 0, 0]
        waits[0] -= delta.gpu_milli
        waits[1] -= delta.cpu_milli
        waits[2] -= delta.memory_mib
        waits[3] -= delta.gpu_memory_mib
        if self.users and job.user in self.users:
            self.user_allocated[job.user] += delta
        entry = gang_entry(job)
        if entry is None or job.key in self.stopped:
            self._gangs.pop(job.key, None)
        else:
            if job.key not in self._gangs:
                self._gangs_reordered = True
            self._gangs[job.key] = entry

    def claim(self, job: Job, amount: Resources, sign: int = 1) -> None:
        """Count (or, with ``sign`` -1, give back) GPUs a started task's claims were given
        against the job's queue nodes and its user's quota."""
        claimed = self.claimed
        keys = [*self.lineage(job.queue), *(("@" + job.user,) if job.user else ())]
        for key in keys:
            held = claimed.get(key, Resources())
            claimed[key] = held + amount if sign > 0 else held - amount

    def quota_problem(self, job: Job, extra: Resources) -> str | None:
        """Words saying why ``extra`` more of ``job`` may not be admitted now (the policy's
        admission: the first queue node, leaf upward, or the user whose quota it would
        break); None when it may."""
        return self.policy.admission.problem(self, job, extra)

    def fair_share_problem(self, job: Job, extra: Resources) -> str | None:
        """Words naming the first queue node (leaf upward, the root aside) that would hold more
        than its fair share of a resource ``extra`` asks for; None when every level stays at or
        below it. Queue nodes without a computed fair share are not limited."""
        from aipaas.scheduler.batch.explain import fair_share_message

        # A resource the cluster does not measure (GPU memory on most engines) has no share.
        asked = [
            want > 0 and have > 0
            for want, have in zip(extra.as_tuple(), self.capacity.as_tuple(), strict=True)
        ]
        capacity = self.capacity.as_tuple()
        for key in self.lineage(job.queue):
            share = self.fair_share.get(key)
            if key == "" or share is None:
                continue
            held = self.allocated[key]
            after = held + extra
            for want, used, fair, have in zip(
                asked, after.as_tuple(), share.as_tuple(), capacity, strict=True
            ):
                # A share of the whole cluster (nobody else wants any) is no limit of its
                # own: going above it is going above the cluster, which placement explains.
                if want and used > fair and fair < have:
                    counted = Resources(
                        *(w if a else 0 for w, a in zip(extra.as_tuple(), asked, strict=True))
                    )
                    return fair_share_message(key, share, held, counted)
        return None

    def pending_gangs(self) -> dict[str, tuple[list[Task], Resources]]:
        """Per job with a gang to start (in the snapshot's order): its ``gang_tasks`` and what
        they ask for together; worked out once and kept up to date by ``account`` (long
        backlogs are walked by several actions). Not to be changed by the caller."""
        if self._gangs_reordered:
            gangs = self._gangs
            self._gangs = {key: gangs[key] for key in self.jobs if key in gangs}
            self._gangs_reordered = False
        return self._gangs

    def considered(self, job: Job) -> bool:
        """The enqueue action let the job in (or none ran), and its queue admits work."""
        if self.stopped and job.key in self.stopped:
            return False
        return self.enqueued is None or job.key in self.enqueued

    # --- the cycle ------------------------------------------------------------------

    def statement(self) -> Statement:
        return Statement(self)

    def wait(self, job: Job, reason: str, message: str) -> None:
        """Say why ``job`` waits (the last action that looked at it has the last word)."""
        self.waiting[job.key] = (reason, message)

    def gangs_waiting(self) -> dict[str, tuple[list[Task], Resources]]:
        """The gangs still to start, as kept (``pending_gangs`` without its reordering): the
        end of a cycle reads which jobs have one (batch/run.py)."""
        return self._gangs

    def report(self) -> dict[str, QueueReport]:
        """Per queue node: guaranteed, quota, fair share, allocated, pending, borrowed."""
        pending: dict[str, Resources] = defaultdict(Resources)
        for leaf, sums in self._pending.items():
            want_all = Resources(*sums)
            for key in self.lineage(leaf):
                pending[key] = pending[key] + want_all
        out = {}
        for key, queue in self.queues.items():
            share = self.fair_share.get(key, Resources())
            held = self.allocated[key]
            borrowed = Resources(
                *(max(a - s, 0) for a, s in zip(held.as_tuple(), share.as_tuple(), strict=True))
            )
            out[key] = QueueReport(
                guaranteed=queue.guaranteed,
                quota=queue.quota,
                fair_share=share,
                allocated=held,
                pending=pending[key],
                borrowed=borrowed,
            )
        return out
