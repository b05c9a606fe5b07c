"""Session policies by name: the registry a profile's names resolve through, and the
``SessionPolicy`` a session holds.

``POLICIES`` holds the built-in queue orders (``drf``, ``proportion``, ``fifo``), job orders
(``priority``, ``fifo``), admission (``quota``) and victim order (``lowest-priority-newest``).
batch/options.py checks ``spec.batch.fairShare`` and ``jobOrder`` against it (an unknown name
is refused with the names known, as the profile's error for that field); ``Session`` resolves
its options to a ``SessionPolicy`` with ``session_policy``. Registering a name twice is an error,
never a silent override.
"""

from __future__ import annotations

from typing import Any, Final, Generic, TypeVar

from aipaas.scheduler.batch.policy import (
    Admission,
    JobOrder,
    Policy,
    QueueOrder,
    SessionPolicy,
    VictimOrder,
)
from aipaas.scheduler.batch.policy_orders import (
    DominantShareOrder,
    NoQueueOrder,
    PriorityJobOrder,
    ProportionOrder,
    SubmissionJobOrder,
)
from aipaas.scheduler.batch.policy_rules import LowestPriorityNewestFirst, QuotaAdmission

T = TypeVar("T", bound=Policy)

#: the admission and victim order a session uses (profiles name none: one of each exists)
DEFAULT_ADMISSION: Final = "quota"
DEFAULT_VICTIM_ORDER: Final = "lowest-priority-newest"


class _Kind(Generic[T]):
    """The policies of one extension point, by name, in the order registered."""

    def __init__(self, protocol: type) -> None:
        #: the extension point's Protocol (runtime-checkable: a policy is checked against it)
        self.protocol = protocol
        self.by_name: dict[str, T] = {}

    def register(self, policy: T) -> None:
        if not isinstance(policy, self.protocol):
            raise TypeError(f"{policy!r} is not a {self.protocol.__name__}")
        if policy.name in self.by_name:
            raise ValueError(f"{self.protocol.__name__} {policy.name!r} is already registered")
        self.by_name[policy.name] = policy

    def get(self, name: str) -> T:
        found = self.by_name.get(name)
        if found is None:
            raise ValueError(f"unknown {self.protocol.__name__} {name!r}; known: {self.known()}")
        return found

    def known(self) -> str:
        """The names, as pydantic words a literal's choices: 'a', 'b' or 'c'."""
        names = [repr(name) for name in self.by_name]
        return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


class PolicyRegistry:
    """Name -> policy object, per extension point."""

    def __init__(self) -> None:
        self.queue_orders: _Kind[QueueOrder] = _Kind(QueueOrder)
        self.job_orders: _Kind[JobOrder] = _Kind(JobOrder)
        self.admissions: _Kind[Admission] = _Kind(Admission)
        self.victim_orders: _Kind[VictimOrder] = _Kind(VictimOrder)

    def queue_order(self, name: str) -> QueueOrder:
        return self.queue_orders.get(name)

    def job_order(self, name: str) -> JobOrder:
        return self.job_orders.get(name)

    def unregister(self, policy: Policy) -> None:
        """Take ``policy`` out again (a test's own, registered for one case)."""
        kinds: tuple[_Kind[Any], ...] = (
            self.queue_orders,
            self.job_orders,
            self.admissions,
            self.victim_orders,
        )
        for kind in kinds:
            if kind.by_name.get(policy.name) is policy:
                del kind.by_name[policy.name]
                return
        raise ValueError(f"{policy.name!r} is not registered")


def builtin_policies() -> PolicyRegistry:
    registry = PolicyRegistry()
    for queue_order in (DominantShareOrder(), ProportionOrder(), NoQueueOrder()):
        registry.queue_orders.register(queue_order)
    for job_order in (PriorityJobOrder(), SubmissionJobOrder()):
        registry.job_orders.register(job_order)
    registry.admissions.register(QuotaAdmission())
    registry.victim_orders.register(LowestPriorityNewestFirst())
    return registry


POLICIES: Final = builtin_policies()


def session_policy(queue_order: str, job_order: str) -> SessionPolicy:
    """The policy objects of a session whose profile names ``queue_order`` (``fairShare``) and
    ``job_order`` (``jobOrder``), with the one admission and victim order."""
    return SessionPolicy(
        queue_order=POLICIES.queue_order(queue_order),
        job_order=POLICIES.job_order(job_order),
        admission=POLICIES.admissions.get(DEFAULT_ADMISSION),
        victim_order=POLICIES.victim_orders.get(DEFAULT_VICTIM_ORDER),
    )
