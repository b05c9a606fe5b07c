"""The order in which a session considers jobs: down the queue tree by fair share.

The session's policy (batch/policy.py) says what the order is: its queue order shapes the
tree (``drf``: the queue tree, at each level the child with pending work that holds least
against its fair share first; ``proportion``: the leaves flat; ``fifo``: no queues, one list
of jobs) and keys the queue nodes; its job order keys the jobs within a leaf (``priority``:
higher first, then submission order; ``fifo``: submission order). batch/policy_orders.py
has the keys; this module walks them.

Fast for big backlogs: one heap per leaf (jobs) and one per inner node (children, with a
version so that entries made stale by a start are skipped: lazy re-evaluation). A start changes
what the started job's queue and its ancestors hold (``Session.account`` logs the leaf); before
each pick the order re-keys exactly those lineages.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.model import Job
from aipaas.scheduler.batch.policy import NodeKey, TreeShape

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session

_TOP = "\0top"  # the parent of the tree's top node(s): the root, or tenants without one


class JobOrder:
    """Iterate over ``jobs`` in the session's order; each job comes out once. Starts made while
    iterating (through the session's ``account``) re-order what is left."""

    def __init__(self, session: Session, jobs: Iterable[Job]) -> None:
        self._setup(session)
        #: per leaf (or the one global list with no queues): (job key tuple, seq, job)
        self._jobs: dict[str, list[tuple[int, int, int, Job]]] = {}
        # Built in one comprehension and grouped after (backlogs of thousands, per action).
        entries = session.policy.job_order.entries(jobs)
        if self._one_list:
            if entries:
                self._jobs[_TOP] = entries
        else:
            heaps = self._jobs
            for entry in entries:
                heap = heaps.get(entry[3].queue)
                if heap is None:
                    heaps[entry[3].queue] = [entry]
                else:
                    heap.append(entry)
        for heap in self._jobs.values():
            heapq.heapify(heap)
        self._link({leaf: len(heap) for leaf, heap in self._jobs.items()})

    def _setup(self, session: Session) -> None:
        self.session = session
        queue_order = session.policy.queue_order
        #: no queues: the jobs in one list (``_TOP``'s), no tree
        self._one_list = queue_order.shape is TreeShape.NONE
        #: every leaf directly under the top (no inner nodes)
        self._flat = queue_order.shape is TreeShape.LEAVES
        #: a queue node's sort key as holdings stand (bound once: called per re-key)
        self._node_key: Callable[[str], NodeKey] = queue_order.node_key(session)
        #: node -> parent in the order's tree (proportion: every leaf under the top)
        self._parent: dict[str, str] = {}
        self._pending: dict[str, int] = {}
        self._version: dict[str, int] = {}
        self._children: dict[str, list[tuple[NodeKey, int, str]]] = {}

    def _link(self, sizes: dict[str, int]) -> None:
        """Link the leaves holding jobs (``sizes``: how many each) into the order's tree."""
        if not self._one_list:
            for leaf, size in sizes.items():
                path = self._path(leaf)
                for node in path:
                    self._pending[node] = self._pending.get(node, 0) + size
            for node in self._parent:
                self._push(node)
        self._log_seen = len(self.session.account_log)
        #: the leaf of the last pop while nothing was re-keyed since: with no new key the
        #: same path wins again as long as that leaf has jobs left (the descent is skipped)
        self._last: str | None = None

    # --- the tree -------------------------------------------------------------------

    def _path(self, leaf: str) -> list[str]:
        """The leaf and its ancestors (as ordered), each linked to its parent."""
        if self._flat:
            self._parent[leaf] = _TOP
            return [leaf]
        path = list(self.session.lineage(leaf))
        for child, parent in zip(path, [*path[1:], _TOP], strict=True):
            self._parent[child] = parent
        return path

    def _push(self, node: str) -> None:
        version = self._version.get(node, 0) + 1
        self._version[node] = version
        heapq.heappush(
            self._children.setdefault(self._parent[node], []), (self._node_key(node), version, node)
        )

    def _top_child(self, parent: str) -> str | None:
        heap = self._children.get(parent)
        while heap:
            _, version, node = heap[0]
            if version == self._version[node] and self._pending.get(node, 0) > 0:
                return node
            heapq.heappop(heap)
        return None

    def _refresh_changed(self) -> None:
        """Re-key the lineages whose holdings changed since the last pick."""
        log = self.session.account_log
        if self._log_seen == len(log):
            return
        self._last = None
        leaves = set(log[self._log_seen :])
        self._log_seen = len(log)
        done: set[str] = set()
        for leaf in leaves:
            # The whole lineage, not only the order's own nodes: an eviction in a queue with
            # no job in this order still changes what its ancestors (in the order) hold.
            chain = [leaf] if self._flat else self.session.lineage(leaf)
            for node in chain:
                if node in done:
                    break  # its ancestors were walked with it
                done.add(node)
                if node in self._parent and self._pending.get(node, 0) > 0:
                    self._push(node)

    # --- iteration ------------------------------------------------------------------

    def pop(self) -> Job | None:
        """The next job, or None when every job came out."""
        if self._one_list:
            heap = self._jobs.get(_TOP)
            return heapq.heappop(heap)[3] if heap else None
        node = self._next_leaf()
        if node is None:
            return None
        job = heapq.heappop(self._jobs[node])[3]
        self._taken(node, 1)
        return job

    def _next_leaf(self) -> str | None:
        """The leaf the next job comes from (None: no job is left)."""
        self._refresh_changed()
        node = self._last
        if node is None or not self._jobs[node]:
            node = _TOP
            while node not in self._jobs or node == _TOP:
                child = self._top_child(node)
                if child is None:
                    return None
                node = child
            self._last = node
        return node

    def take_while(self, leaf: str, same: Callable[[Job], bool]) -> list[Job]:
        """Take out the jobs that ``pop`` would return next, while they are of ``leaf`` and
        ``same`` holds for them, in that order. Only right after ``pop`` gave a job of
        ``leaf`` with nothing accounted since (the order then stays on that leaf): a backlog
        of jobs that fare alike is passed over at once; otherwise nothing is taken."""
        if self._log_seen != len(self.session.account_log):
            return []
        if self._one_list:
            heap = self._jobs.get(_TOP)
            taken = []
            while heap and heap[0][3].queue == leaf and same(heap[0][3]):
                taken.append(heapq.heappop(heap)[3])
            return taken
        if self._last != leaf:
            return []
        heap = self._jobs[leaf]
        taken = []
        while heap and same(heap[0][3]):
            taken.append(heapq.heappop(heap)[3])
        self._taken(leaf, len(taken))
        return taken

    def take_alike(self, job: Job, *, priority: bool, level: bool) -> list[Job]:
        """``take_while`` for the jobs of ``job``'s queue with its gang kind
        (``session.gang_kind``: the same gang request and shapes), and its priority
        (``priority``) and required topology level (``level``) where asked; the test
        written out, not called per job (a backlog of thousands)."""
        from aipaas.scheduler.batch.session import gang_kind

        kind = gang_kind(job)
        if kind is None:
            return []
        wanted, label = job.priority, job.topology_required
        alike = alike_test(kind, wanted, label, priority=priority, level=level)
        leaf = job.queue
        if self._log_seen != len(self.session.account_log):
            return []
        if self._one_list:
            return self.take_while(leaf, alike)
        if self._last != leaf:
            return []
        heap = self._jobs[leaf]
        taken = []
        pop = heapq.heappop
        while heap:
            other = heap[0][3]
            cached = other._idle_gang
            if (
                cached is None
                or cached[4] is not kind
                or cached[0] != other.min_available
                or (priority and other.priority != wanted)
                or (level and other.topology_required != label)
            ):
                break
            taken.append(pop(heap)[3])
        self._taken(leaf, len(taken))
        return taken

    def _taken(self, leaf: str, count: int) -> None:
        """``count`` jobs of ``leaf`` left the order: its lineage has that many fewer pending."""
        current: str | None = leaf if count else None
        while current is not None and current != _TOP:
            self._pending[current] -= count
            current = self._parent.get(current)

    def drain(self, leaf: str) -> list[Job]:
        """Take every job still in ``leaf`` out of the order (any order; none in an order
        with no queues): a queue whose rest waits alike costs no pops."""
        if self._one_list:
            return []
        heap = self._jobs.get(leaf)
        if not heap:
            return []
        jobs = [entry[3] for entry in heap]
        heap.clear()
        current: str | None = leaf
        while current is not None and current != _TOP:
            self._pending[current] -= len(jobs)
            current = self._parent.get(current)
        return jobs

    def __iter__(self) -> Iterator[Job]:
        while (job := self.pop()) is not None:
            yield job


def alike_test(
    kind: object, wanted: int, label: str | None, *, priority: bool, level: bool
) -> Callable[[Job], bool]:
    """Whether a job waits with an idle gang of ``kind`` (``session.gang_kind``) and its own
    minAvailable, and, where asked, priority ``wanted`` and required topology level ``label``
    (``JobOrder.take_alike``)."""

    def alike(other: Job) -> bool:
        cached = other._idle_gang
        return (
            cached is not None
            and cached[4] is kind
            and cached[0] == other.min_available
            and (not priority or other.priority == wanted)
            and (not level or other.topology_required == label)
        )

    return alike


def ordered(session: Session, jobs: Iterable[Job]) -> JobOrder:
    """The session's order over ``jobs`` (see the module docstring)."""
    return JobOrder(session, jobs)
