"""The session's order over runs of jobs alike (batch/ordering.py's, for a queue order with
queues and a job order whose key is the priority then the submission order: ``runs_by_priority``),
for a backlog kept grouped across cycles (batch/backlog_book.py).

A ``JobOrder`` puts every job in its leaf's heap: thousands of entries built, heapified and
popped per cycle. Here a leaf's heap holds one cursor per run (a group of the book: jobs of
one leaf and priority, in submission order; or one job alone): popping advances the cursor,
and ``take_alike`` takes the run's jobs that come before the next run's head in one slice.
The jobs come out in exactly the order a ``JobOrder`` over the same jobs gives, provided no
two jobs share their (priority, order) (the book refuses such jobs).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aipaas.scheduler.batch.model import Job
from aipaas.scheduler.batch.ordering import JobOrder, alike_test

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session

#: a run's cursor: [priority key, order of its next job, seq, index of its next job, its
#: jobs, their orders] (a list: the cursor moves in place; seq breaks every tie before the
#: fields that do not compare)
_Cursor = list[Any]


class GroupedOrder(JobOrder):
    """``JobOrder`` over ``runs`` (each: jobs of one leaf and one priority, in submission
    order, with their orders) and ``singles`` (jobs one by one)."""

    def __init__(
        self,
        session: Session,
        runs: Sequence[tuple[Sequence[Job], Sequence[int]]],
        singles: Sequence[Job],
    ) -> None:
        self._setup(session)
        if self._one_list:
            raise ValueError("a grouped order needs queues (fairShare drf or proportion)")
        job_order = session.policy.job_order
        if not job_order.runs_by_priority:
            raise ValueError(f"job order {job_order.name!r} does not keep runs by priority")
        rank = job_order.key
        heaps: dict[str, list[_Cursor]] = {}
        sizes: dict[str, int] = {}
        seq = 0
        for jobs, orders in [*runs, *[((j,), (j.order,)) for j in singles]]:
            if not jobs:
                continue
            head = jobs[0]
            cursor = [rank(head)[0], orders[0], seq, 0, jobs, orders]
            seq += 1
            heaps.setdefault(head.queue, []).append(cursor)
            sizes[head.queue] = sizes.get(head.queue, 0) + len(jobs)
        for heap in heaps.values():
            heapq.heapify(heap)
        self._jobs = heaps  # type: ignore[assignment]  # cursors instead of job entries
        self._link(sizes)

    def _cursors(self, leaf: str) -> list[_Cursor]:
        return self._jobs[leaf]  # type: ignore[return-value]

    def pop(self) -> Job | None:
        node = self._next_leaf()
        if node is None:
            return None
        heap = self._cursors(node)
        top = heap[0]
        at = top[3]
        job: Job = top[4][at]
        self._advance(heap, top, at + 1)
        self._taken(node, 1)
        return job

    @staticmethod
    def _advance(heap: list[_Cursor], top: _Cursor, at: int) -> None:
        """Move the top cursor to its job ``at`` (out of the heap past its last)."""
        if at >= len(top[4]):
            heapq.heappop(heap)
        else:
            top[3] = at
            top[1] = top[5][at]
            heapq.heapreplace(heap, top)

    @staticmethod
    def _run_end(heap: list[_Cursor], top: _Cursor) -> int:
        """Where the top cursor's run stops coming first: its end, or its first job after
        the head of the next cursor."""
        jobs = top[4]
        if len(heap) == 1:
            return len(jobs)
        following = heap[1] if len(heap) == 2 or heap[1] < heap[2] else heap[2]
        if following[0] > top[0]:
            return len(jobs)
        return bisect_left(top[5], following[1], top[3])

    def take_while(self, leaf: str, same: Callable[[Job], bool]) -> list[Job]:
        if self._log_seen != len(self.session.account_log) or self._last != leaf:
            return []
        heap = self._cursors(leaf)
        taken: list[Job] = []
        while heap:
            top = heap[0]
            job = top[4][top[3]]
            if not same(job):
                break
            taken.append(job)
            self._advance(heap, top, top[3] + 1)
        self._taken(leaf, len(taken))
        return taken

    def take_alike(self, job: Job, *, priority: bool, level: bool) -> list[Job]:
        """As ``JobOrder.take_alike``; a run's jobs are alike in everything it tests (one
        group of the book: leaf, priority, level, min_available and gang kind), so each run
        is tested by its next job and taken as a slice."""
        from aipaas.scheduler.batch.session import gang_kind

        kind = gang_kind(job)
        if kind is None:
            return []
        leaf = job.queue
        if self._log_seen != len(self.session.account_log) or self._last != leaf:
            return []
        alike = alike_test(
            kind, job.priority, job.topology_required, priority=priority, level=level
        )
        heap = self._cursors(leaf)
        taken: list[Job] = []
        while heap:
            top = heap[0]
            at = top[3]
            if not alike(top[4][at]):
                break
            end = self._run_end(heap, top)
            taken.extend(top[4][at:end])
            self._advance(heap, top, end)
        self._taken(leaf, len(taken))
        return taken

    def drain(self, leaf: str) -> list[Job]:
        heap = self._jobs.get(leaf)
        if not heap:
            return []
        jobs = [job for cursor in self._cursors(leaf) for job in cursor[4][cursor[3] :]]
        heap.clear()
        self._taken(leaf, len(jobs))
        return jobs
