"""A queue's head keeps its place: within a leaf queue, a job that cannot start but could by
preemption holds back the jobs of lower priority behind it: they would take what it waits for.

Without it a waiting high-priority gang starves behind a stream of small low-priority jobs of
its own queue: each cycle they fill the room (or the fair share, or the quota) that the gang
waits to see freed, and the jobs they start are this cycle's, which preemption may not take.
Kueue gets the order right the same way: a head that needs preemption keeps the capacity it
waits for in its cycle, and other workloads that would use those resources are skipped.

Only where the head may preempt (the profile runs ``preempt`` and its queue runs preemptible
jobs of lower priority, past their minRuntime, that hold with what is idle at least what it
asks for: the room it waits for can be made, and the preempt action that follows allocate
makes it) and has no backfill reservation (a reservation already
keeps later jobs off the nodes and times it needs), nor is kept off nodes reserved for a job of
at least its priority (preempt may not start it there). Elsewhere a job that cannot start does not
block smaller ones: holding them would only leave room idle. Jobs of equal priority are not
held (equal priority never preempts; they keep best-effort FIFO).

A held job waits with reason HeldForHead: it is no preemptor and no reclaimer this cycle
(victims.preemptor_jobs), and in allocate's borrowing pass it (as every borrower) takes only
what is idle beyond what the waiting heads ask for together: their amount is set aside as a
counter, not a placement. The cost is one look-up per job and one walk over the running jobs
per cycle, at the first refusal: no placement search. What it does cost is a longer backlog of
waiting low-priority jobs that every action walks (in Kueue's scale scenario: 10x the CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.model import Job, Resources
from aipaas.scheduler.batch.statement import touched_jobs
from aipaas.scheduler.batch.victims import eligible

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session


@dataclass(frozen=True, slots=True)
class Head:
    job: Job
    want: Resources


class HeadHolds:
    """Per leaf queue, the highest-priority job refused so far this pass (the first one, as
    jobs come in priority order within a queue)."""

    def __init__(self, session: Session, idle: Callable[[], Resources]) -> None:
        self.session = session
        self._idle_now = idle
        self._idle: Resources | None = None
        options = session.options
        self.enabled = options.holdForHead and "preempt" in options.actions
        self._heads: dict[str, Head] = {}
        #: what the waiting heads ask for together
        self._aside = Resources()
        self._messages: dict[tuple[str, int], tuple[str, str]] = {}
        #: per leaf queue, (priority, what it holds) of each job preempt could take (worked
        #: out at the first refusal of the cycle)
        self._takeable: dict[str, list[tuple[int, Resources]]] | None = None
        #: per (queue, priority): preemption could make room for that much (asked once)
        self._could: dict[tuple[str, int], Resources] = {}
        #: per leaf queue, (priority, [(node, resources)] of its running tasks) of each job
        #: preempt could take (with ``_takeable``)
        self._tasks_by_queue: dict[str, list[tuple[int, list[tuple[str, Resources]]]]] | None = None
        #: per (queue, priority): the most one node could offer, per resource (asked once)
        self._best_node: dict[tuple[str, int], tuple[int, int, int]] = {}
        self._free_max: tuple[int, int, int] | None = None
        self._held_by = session.memos.held_by

    def refused(self, job: Job, want: Resources) -> None:
        """``job`` could not start: it becomes its queue's head unless one is held already, or
        its reservation (backfill) keeps its place."""
        if not self.enabled or job.queue in self._heads:
            return
        if job.key in self.session.reservations.held:
            return
        if self.session.reservations.allowed_by_priority(job) is not None:
            # Kept off nodes reserved for a job of at least its priority: its preemption
            # may not delay that reservation, and the jobs behind it are bound by it too.
            return
        if not want.fits_within(self._reachable(job)):
            return  # no preemption can make its room: it holds nothing back
        if not self._one_node_could_hold(job):
            return  # nor where its largest task would have to go: no node could give that much
        self._heads[job.queue] = Head(job, want)
        self._aside = self._aside + want

    def _reachable(self, job: Job) -> Resources:
        """What is idle plus what the jobs of lower priority that preempt could take from
        the job's queue hold: a head asking for more could not start by preemption (a counter,
        as the quota check of the preempt action; nodes are the preempt action's business)."""
        key = (job.queue, job.priority)
        found = self._could.get(key)
        if found is None:
            takeable = [r for p, r in self._victims().get(job.queue, ()) if p < job.priority]
            if not takeable:
                found = Resources()  # nothing to take: idle alone is no preemption's doing
            else:
                if self._idle is None:
                    self._idle = self._idle_now()
                found = self._idle
                for held in takeable:
                    found = found + held
            self._could[key] = found
        return found

    def _one_node_could_hold(self, job: Job) -> bool:
        """Some node could hold the gang's largest task (in GPUs, CPU and memory, each on its
        own: an upper bound) with what is free on it plus what preempt could take there from
        the job's queue. Counters over the whole cluster miss fragmentation: 3 GPUs free on
        one node and 1 takeable on another are no room for a 4-GPU task, and holding back the
        queue's smaller jobs for it would only leave those 3 idle."""
        largest = (0, 0, 0)
        needed = job.min_available - len(job.running_tasks)
        for task in job.tasks:
            if needed <= 0:
                break
            if task.placement is None:
                needed -= 1
                r = task.resources
                largest = (
                    max(largest[0], r.gpu_milli),
                    max(largest[1], r.cpu_milli),
                    max(largest[2], r.memory_mib),
                )
        key = (job.queue, job.priority)
        best = self._best_node.get(key)
        if best is None:
            best = self._most_free()
            engine = self.session.engine
            for node, held in self._takeable_on_nodes(job.queue, job.priority).items():
                free = engine.free(node)
                best = (
                    max(best[0], free.gpu_milli + held[0]),
                    max(best[1], free.cpu_milli + held[1]),
                    max(best[2], free.memory_mib + held[2]),
                )
            self._best_node[key] = best
        return all(want <= have for want, have in zip(largest, best, strict=True))

    def _most_free(self) -> tuple[int, int, int]:
        """The most any one node has free, per resource (worked out once per cycle)."""
        if self._free_max is None:
            gpu = cpu = memory = 0
            engine = self.session.engine
            for node in engine.nodes:
                free = engine.free(node.name)
                gpu, cpu = max(gpu, free.gpu_milli), max(cpu, free.cpu_milli)
                memory = max(memory, free.memory_mib)
            self._free_max = (gpu, cpu, memory)
        return self._free_max

    def _takeable_on_nodes(self, queue: str, priority: int) -> dict[str, tuple[int, int, int]]:
        """Per node, what the jobs of ``queue`` below ``priority`` that preempt could take hold."""
        out: dict[str, tuple[int, int, int]] = {}
        for job_priority, tasks in self._victim_tasks().get(queue, ()):
            if job_priority >= priority:
                continue
            for node, r in tasks:
                gpu, cpu, memory = out.get(node, (0, 0, 0))
                out[node] = (gpu + r.gpu_milli, cpu + r.cpu_milli, memory + r.memory_mib)
        return out

    def _victim_tasks(self) -> dict[str, list[tuple[int, list[tuple[str, Resources]]]]]:
        self._victims()
        assert self._tasks_by_queue is not None
        return self._tasks_by_queue

    def _victims(self) -> dict[str, list[tuple[int, Resources]]]:
        if self._takeable is None:
            session = self.session
            protected = touched_jobs(session)
            takeable: dict[str, list[tuple[int, Resources]]] = {}
            tasks: dict[str, list[tuple[int, list[tuple[str, Resources]]]]] = {}
            for job in session.running:
                if eligible(session, job, protected):
                    takeable.setdefault(job.queue, []).append((job.priority, job.allocated()))
                    on_nodes = [
                        (t.placement.node, t.resources)
                        for t in job.running_tasks
                        if t.placement is not None
                    ]
                    tasks.setdefault(job.queue, []).append((job.priority, on_nodes))
            self._takeable = takeable
            self._tasks_by_queue = tasks
        return self._takeable

    def started(self, job: Job) -> None:
        """The head started (borrowing): what it held back may go."""
        head = self._heads.get(job.queue)
        if head is not None and head.job.key == job.key:
            del self._heads[job.queue]
            self._aside = self._aside - head.want

    def is_head(self, job: Job) -> bool:
        head = self._heads.get(job.queue)
        return head is not None and head.job.key == job.key

    @property
    def aside(self) -> Resources:
        """What the waiting heads ask for together."""
        return self._aside

    def set_aside(self, job: Job) -> Resources:
        """What the waiting heads ask for, but ``job``'s own part when it is one: idle capacity
        a borrower leaves alone."""
        head = self._heads.get(job.queue)
        if head is not None and head.job.key == job.key:
            return self._aside - head.want
        return self._aside

    def holding(self, job: Job) -> Head | None:
        """The head that holds ``job`` back, if any."""
        head = self._heads.get(job.queue)
        if head is None or head.job.key == job.key or job.priority >= head.job.priority:
            return None
        return head

    def wait(self, job: Job, head: Head) -> None:
        key = (head.job.key, job.priority)
        message = self._messages.get(key)
        if message is None:  # a backlog behind one head shares its words
            why = self.session.waiting.get(head.job.key, ("", "it cannot start"))[1]
            message = self._messages[key] = (
                "HeldForHead",
                f"queue {job.queue} holds its room for {head.job.key} (priority "
                f"{head.job.priority} > {job.priority}), which waits: {why}",
            )
        self.session.waiting[job.key] = message
        self._held_by[job.key] = head.job.key
