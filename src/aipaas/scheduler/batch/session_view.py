"""What the session's helpers read of it, as Protocols.

``Statement`` (statement.py) and ``Reservations`` (reservations.py, reservations_fit.py) are
made by the ``Session`` (session.py), which imports them; they name the session by these
Protocols instead of importing session.py back, so the package has no import circle
(tests/unit/controller/test_core_import_graph.py). ``Session`` satisfies both; mypy
checks it where the session passes itself.

Who imports it: statement.py, reservations.py, reservations_fit.py.
"""

from __future__ import annotations

from typing import Protocol

from aipaas.scheduler.batch.cluster import PlacementEngine
from aipaas.scheduler.batch.model import Decisions, Job, QueueNode, Resources
from aipaas.scheduler.batch.options import BatchOptions
from aipaas.scheduler.batch.policy import SessionPolicy


class SessionLedger(Protocol):
    """What a ``Statement`` reads and changes: the engine it places through, the moment,
    the decisions, and the accounts of the queue tree (``account``) and of claims' GPUs."""

    engine: PlacementEngine
    now: float
    decisions: Decisions
    freed_nodes: set[str]

    def account(self, job: Job, amount: Resources, sign: int = 1) -> None: ...

    def claim(self, job: Job, amount: Resources, sign: int = 1) -> None: ...

    def quota_problem(self, job: Job, extra: Resources) -> str | None: ...


class SessionPlan(SessionLedger, Protocol):
    """What ``Reservations`` read besides: the jobs, the queue tree with its fair shares and
    holdings, the profile's options and the policy they name."""

    jobs: dict[str, Job]
    queues: dict[str, QueueNode]
    options: BatchOptions
    policy: SessionPolicy
    fair_share: dict[str, Resources]
    allocated: dict[str, Resources]

    def lineage(self, key: str) -> tuple[str, ...]: ...
