"""The batch session's policy as extension points: one Protocol per question a cycle asks
(as framework/interfaces.py does for placement).

- ``QueueOrder``: how the order's tree is shaped (the queue tree, its leaves flat, or no
  queues), the sort key of a queue node, each queue node's fair share, and whether fair share
  limits allocation (``spec.batch.fairShare``: drf, proportion, fifo);
- ``JobOrder``: a job's sort key within its leaf (``spec.batch.jobOrder``: priority, fifo);
- ``Admission``: whether a job may be admitted now with more resources (quota);
- ``VictimOrder``: the order in which preempt and reclaim try victims.

The implementations: policy_orders.py (queue and job orders), policy_rules.py (admission and
victim order); policy_registry.py names them. A ``Session`` holds the ones its options name
(``Session.policy``, a ``SessionPolicy``); batch/ordering.py, the actions, fairshare.py and
victim_search.py ask them instead of comparing names.

The policies see the session through ``SessionState`` (what they read of it), not the
``Session`` class: the registry is imported by options.py and session.py, so nothing it
imports may import the session back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from aipaas.scheduler.batch.model import Job, QueueNode, Resources

if TYPE_CHECKING:
    from aipaas.scheduler.batch.victim_units import Unit

#: a queue node's sort key among its siblings, lower first: (0 below its fair share else 1,
#: minus its priority, its share ratio, its creation order)
NodeKey = tuple[int, int, float, int]
#: a job's entry in its leaf's heap: (its key's two parts, its place in the input, the job)
JobEntry = tuple[int, int, int, Job]


class TreeShape(Enum):
    """What an order descends: the queue tree level by level, every leaf directly under the
    top, or no queues at all (one list of jobs)."""

    TREE = "tree"
    LEAVES = "leaves"
    NONE = "none"


class SessionState(Protocol):
    """What the policies read of a session (``Session`` has all of it)."""

    @property
    def queues(self) -> Mapping[str, QueueNode]: ...

    @property
    def allocated(self) -> Mapping[str, Resources]:
        """What each queue node holds now (a default of nothing for one never counted)."""
        ...

    @property
    def fair_share(self) -> Mapping[str, Resources]: ...

    @property
    def capacity(self) -> Resources: ...

    @property
    def claimed(self) -> Mapping[str, Resources]: ...

    @property
    def users(self) -> Mapping[str, Resources]: ...

    @property
    def user_allocated(self) -> Mapping[str, Resources]: ...

    def lineage(self, key: str) -> tuple[str, ...]: ...


class Policy(Protocol):
    name: str


@runtime_checkable
class QueueOrder(Policy, Protocol):
    #: how the order's tree is shaped
    shape: TreeShape
    #: whether a start must keep the job's queues at or below their fair share (allocate's
    #: first pass, backfill, a backfill reservation's plan)
    limits_allocation: bool
    #: whether reclaim also takes from the sharers of GPUs whose idle slivers strand the
    #: reclaimers' shares (actions/slivers.py: it needs GPU shares per queue)
    reclaims_slivers: bool

    def node_key(self, session: SessionState) -> Callable[[str], NodeKey]:
        """The sort key of a queue node as the session's holdings stand when it is called;
        asked once per order, called each time a node is (re-)keyed."""
        ...

    def fair_shares(
        self,
        queues: Mapping[str, QueueNode],
        demand: Mapping[str, Resources],
        capacity: Resources,
        now: float,
        usage_over_time: bool,
    ) -> dict[str, Resources]:
        """Every queue node's fair share for the cycle (``usage_over_time``: honour queues'
        ``usage_half_life``)."""
        ...


@runtime_checkable
class JobOrder(Policy, Protocol):
    #: the key is (a function of the job's priority alone, its submission order): a backlog
    #: grouped by leaf and priority can be ordered run by run (batch/ordering_groups.py)
    runs_by_priority: bool

    def key(self, job: Job) -> tuple[int, int]:
        """The job's sort key within its leaf, lower first."""
        ...

    def entries(self, jobs: Iterable[Job]) -> list[JobEntry]:
        """(key, place in ``jobs``, job) for every job: ``key`` of each, in one comprehension
        (backlogs of thousands are ordered several times a cycle)."""
        ...


@runtime_checkable
class Admission(Policy, Protocol):
    def problem(self, session: SessionState, job: Job, extra: Resources) -> str | None:
        """Words saying why ``job`` may not hold ``extra`` more now; None when it may."""
        ...


@runtime_checkable
class VictimOrder(Policy, Protocol):
    def units(self, jobs: Iterable[Job]) -> list[Unit]:
        """The eviction steps of ``jobs`` in the order a search tries them first."""
        ...

    def second(self, units: Sequence[Unit]) -> list[Unit]:
        """The same steps in the order a search tries when the first needs more victims."""
        ...


@dataclass(frozen=True, slots=True)
class SessionPolicy:
    """The policy objects of one session."""

    queue_order: QueueOrder
    job_order: JobOrder
    admission: Admission
    victim_order: VictimOrder


def entries_by_key(key: Callable[[Job], tuple[int, int]], jobs: Iterable[Job]) -> list[JobEntry]:
    """``JobOrder.entries`` by one call of ``key`` per job: for an order with no faster way."""
    return [(*key(job), seq, job) for seq, job in enumerate(jobs)]
