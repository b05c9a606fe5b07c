"""The waiting backlog kept across cycles, for a caller whose jobs live from cycle to cycle
(the simulator: ``sim/scenario_run.py``).

A session walks every job of its snapshot; with thousands waiting and hundreds of cycles that
walk is most of a run's cost, although the backlog barely changes between two cycles. A
``BacklogBook`` holds the jobs of the snapshot split in two:

- ``idle``: one-task jobs whose task does not run and whose gang is known and has a kind
  (``session.gang_kind``: no device claims), with what each leaf's idle jobs ask for together
  (``sums``) and the jobs grouped by (leaf, priority, required topology level, min_available,
  gang kind), each group in submission order: jobs of one group fare alike wherever a verdict
  depends on nothing else (enqueue), and come out of an ordering as one run
  (batch/ordering_groups.py);
- ``others``: every other job (running, multi-task, with claims), with the rank the caller
  submitted it at (a session keeps its running jobs in the snapshot's order).

The caller tells the book every change it makes or sees: ``add`` a submitted job, ``sync`` one
a cycle started or evicted, ``remove`` one that ended. A session given the book takes the idle
part from it (``Session(..., book=...)``) instead of walking it; what it decides is what a
session without the book decides (tests/unit/scheduler/batch/test_backlog_book_same_decisions.py).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping

from aipaas.scheduler.batch.gangs import gang_entry, gang_kind, job_total
from aipaas.scheduler.batch.model import Job, Resources, Task

#: a group of idle jobs: (leaf queue, priority, required topology level, min_available, the
#: identity of its gang kind: kinds are shared objects, told apart by identity)
GroupKey = tuple[str, int, str | None, int, int]


class Group:
    """Idle jobs alike: by key (``members``) and in submission order (``jobs``, ``orders``)."""

    __slots__ = ("jobs", "members", "orders")

    def __init__(self) -> None:
        self.members: dict[str, Job] = {}
        self.jobs: list[Job] = []
        self.orders: list[int] = []

    def add(self, job: Job) -> None:
        self.members[job.key] = job
        orders = self.orders
        if not orders or orders[-1] < job.order:  # most arrive last
            orders.append(job.order)
            self.jobs.append(job)
        else:
            at = bisect_left(orders, job.order)
            orders.insert(at, job.order)
            self.jobs.insert(at, job)

    def remove(self, job: Job) -> None:
        del self.members[job.key]
        at = bisect_left(self.orders, job.order)
        del self.orders[at], self.jobs[at]


class BacklogBook:
    """The snapshot's jobs as ``idle`` (grouped) and ``others``; see the module docstring."""

    def __init__(self) -> None:
        self.idle: dict[str, Job] = {}
        #: per idle job: its gang and what it asks for (``session.gang_entry``)
        self.entries: dict[str, tuple[list[Task], Resources]] = {}
        self.groups: dict[GroupKey, Group] = {}
        self._group_of: dict[str, GroupKey] = {}
        #: per leaf: what its idle jobs ask for together [gpu, cpu, memory, GPU memory]
        self.sums: dict[str, list[int]] = {}
        #: per leaf: how many idle jobs it has (a leaf with none is not in ``sums``)
        self.counts: dict[str, int] = {}
        self.others: dict[str, Job] = {}
        #: every job, in the order added (the snapshot's order)
        self.jobs: dict[str, Job] = {}
        #: per job: the order it was added in (the snapshot's order)
        self.rank: dict[str, int] = {}
        self._next = 0
        self._orders: set[int] = set()

    def __len__(self) -> int:
        return len(self.idle) + len(self.others)

    def add(self, job: Job) -> None:
        """A job enters the snapshot (after every job added before it)."""
        if job.key in self.rank:
            raise ValueError(f"job {job.key} is in the book already")
        if job.order in self._orders:
            # Orderings break ties of priority and order by the position in the snapshot,
            # which the idle part does not keep: orders must tell every job apart.
            raise ValueError(f"job {job.key}: order {job.order} is taken by another job")
        self._orders.add(job.order)
        self.rank[job.key] = self._next
        self._next += 1
        self.jobs[job.key] = job
        self._place(job)

    def sync(self, job: Job) -> None:
        """A job of the book changed (a task started or was evicted)."""
        self._take_out(job)
        self._place(job)

    def remove(self, job: Job) -> None:
        """A job leaves the snapshot (it ended)."""
        self._take_out(job)
        del self.rank[job.key], self.jobs[job.key]
        self._orders.discard(job.order)

    def candidates(
        self,
        gangs: Mapping[str, object],
        may: Callable[[Job], bool] | None = None,
        above: Mapping[str, int] | None = None,
    ) -> list[str]:
        """The keys of the jobs with a gang to start (``gangs``: the session's
        ``pending_gangs``) that may take room from others (``victims.preemptor_jobs``), as far
        as a look per group tells: a group whose priority is at or below what ``above`` gives
        its leaf, or whose first job still waiting ``may`` turns away, is passed over whole
        (``may`` must answer alike for jobs alike: one leaf, priority, level and gang request);
        every other job, and every job of ``others`` in ``gangs``, is named (it may have
        started since: the caller looks at each). In group order, not the snapshot's."""
        out: list[str] = []
        for (queue, priority, _, _, _), group in self.groups.items():
            if above is not None and priority <= above.get(queue, priority):
                continue
            if may is not None:
                first = next((j for j in group.jobs if j.key in gangs), None)
                if first is None or not may(first):
                    continue
            out.extend(group.members)
        out.extend(key for key in self.others if key in gangs)
        return out

    def _place(self, job: Job) -> None:
        tasks = job.tasks
        if len(tasks) != 1 or tasks[0].placement is not None:
            self.others[job.key] = job
            return
        entry = gang_entry(job)
        kind = gang_kind(job)
        if entry is None or kind is None:
            self.others[job.key] = job
            return
        key = job.key
        self.idle[key] = job
        self.entries[key] = entry
        group_key = (job.queue, job.priority, job.topology_required, job.min_available, id(kind))
        self._group_of[key] = group_key
        group = self.groups.get(group_key)
        if group is None:
            group = self.groups[group_key] = Group()
        group.add(job)
        total = job_total(job)
        sums = self.sums.get(job.queue)
        if sums is None:
            sums = self.sums[job.queue] = [0, 0, 0, 0]
            self.counts[job.queue] = 0
        self.counts[job.queue] += 1
        for i in range(4):
            sums[i] += total[i]

    def _take_out(self, job: Job) -> None:
        key = job.key
        if self.others.pop(key, None) is not None:
            return
        if self.idle.pop(key, None) is None:
            return
        del self.entries[key]
        group_key = self._group_of.pop(key)
        group = self.groups[group_key]
        group.remove(job)
        if not group.members:
            del self.groups[group_key]
        total = job_total(job)
        sums = self.sums[job.queue]
        for i in range(4):
            sums[i] -= total[i]
        self.counts[job.queue] -= 1
        if not self.counts[job.queue]:
            del self.counts[job.queue], self.sums[job.queue]
