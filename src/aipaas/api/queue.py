"""Queue: a tenant's line of jobs, a node of the queue tree (issue 11).

The tree is cluster -> tenants -> queues -> sub-queues (``spec.parent`` names a queue of the
same tenant); jobs go only in leaf queues. Each level has, per resource, ``guaranteed`` (always
reachable, by reclaim if need be), ``quota`` (the most it may ever hold), ``weight`` (its share
among siblings of what is above guarantees) and ``priority`` (siblings of higher priority get
capacity above guarantees first).

A queue's weight is relative to its siblings: the tenant's share of the cluster is its Tenant's
``spec.weight`` (set by a platform admin), and a tenant-admin divides it among its queues. More
queues or larger weights therefore gain a tenant nothing against the others.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import ClassVar, Final, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from aipaas.api.duration import Duration, PositiveDuration
from aipaas.api.meta import LenientModel, Model, Name, Object
from aipaas.api.resources import Quota

MAX_WEIGHT: Final = 1000
#: bounds of a queue's or tenant's ``priority`` (an ordering among siblings, not a job priority)
MAX_QUEUE_PRIORITY: Final = 1_000_000
MAX_RESERVATIONS: Final = 1000


class Guaranteed(Quota):
    """What a queue or tenant can always reach (by reclaim if need be); a missing entry means
    nothing guaranteed of that resource. Written as a quota is."""


def guarantee_problems(guaranteed: Quota, quota: Quota) -> list[tuple[str, str]]:
    """(field, reason) for each resource whose guarantee is above its quota."""
    problems = []
    pairs = (
        ("gpu", guaranteed.gpu_milli(), quota.gpu_milli(), guaranteed.gpu, quota.gpu),
        ("cpu", guaranteed.cpu_milli(), quota.cpu_milli(), guaranteed.cpu, quota.cpu),
        ("memory", guaranteed.memory_mib(), quota.memory_mib(), guaranteed.memory, quota.memory),
        (
            "gpuMemory",
            guaranteed.gpu_memory_mib(),
            quota.gpu_memory_mib(),
            guaranteed.gpu_memory,
            quota.gpu_memory,
        ),
    )
    for name, wanted, bound, wanted_text, bound_text in pairs:
        if wanted is not None and bound is not None and wanted > bound:
            problems.append(
                (name, f"{_text(wanted_text)} is more than the quota of {_text(bound_text)}")
            )
    return problems


def _text(value: float | str | None) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def raise_at(model: str, loc: tuple[str | int, ...], value: object, reason: str) -> None:
    """Raise a validation error located at ``loc`` (a ValueError in a model validator would be
    reported at the object's root)."""
    error = PydanticCustomError("invalid", reason)
    raise ValidationError.from_exception_data(
        model, [InitErrorDetails(type=error, loc=loc, input=value)]
    )


def check_guarantees(model: str, prefix: tuple[str, ...], guaranteed: Quota, quota: Quota) -> None:
    problems = guarantee_problems(guaranteed, quota)
    if problems:
        name, reason = problems[0]
        raise_at(model, (*prefix, "guaranteed", name), getattr(guaranteed, _attr(name)), reason)


def _attr(name: str) -> str:
    return "gpu_memory" if name == "gpuMemory" else name


class FairSharing(Model):
    """Fair share over time: usage decays with this half-life (Slurm's fair-share factor)."""

    usage_half_life: PositiveDuration


class QueueSpec(Model):
    #: a queue of the same tenant this one is a sub-queue of (None: directly under the tenant)
    parent: Name | None = None
    weight: float = Field(default=1, ge=0, le=MAX_WEIGHT)
    guaranteed: Guaranteed = Field(default_factory=Guaranteed)
    quota: Quota = Field(default_factory=Quota)
    priority: int = Field(default=0, ge=-MAX_QUEUE_PRIORITY, le=MAX_QUEUE_PRIORITY, strict=True)
    #: how long a job of this queue runs before it may be preempted or reclaimed
    min_runtime: Duration | None = None
    #: how many backfill reservations the queue's jobs may hold at once
    reservations: int = Field(default=1, ge=0, le=MAX_RESERVATIONS, strict=True)
    fair_sharing: FairSharing | None = None


class StatusAmounts(LenientModel):
    """Amounts per resource in a queue's status: GPUs as a number, cpu cores and memory as
    quantities ("500m", "64Gi"); a missing entry is none (or, in ``quota``, no bound)."""

    gpu: int | float | None = None
    cpu: str | None = None
    memory: str | None = None
    gpu_memory: str | None = None


class QueueStatus(LenientModel):
    """What the controller's last cycle saw of the queue (controller/queue_status.py)."""

    guaranteed: StatusAmounts = Field(default_factory=StatusAmounts)
    quota: StatusAmounts = Field(default_factory=StatusAmounts)
    fair_share: StatusAmounts = Field(default_factory=StatusAmounts)
    allocated: StatusAmounts = Field(default_factory=StatusAmounts)
    pending: StatusAmounts = Field(default_factory=StatusAmounts)
    #: allocated above the fair share (what other queues may reclaim)
    borrowed: StatusAmounts = Field(default_factory=StatusAmounts)
    running_jobs: int = 0
    pending_jobs: int = 0


class Queue(Object):
    plural: ClassVar[str] = "queues"

    kind: Literal["Queue"] = "Queue"
    spec: QueueSpec = Field(default_factory=QueueSpec)
    status: QueueStatus | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Queue:
        if self.spec.parent is not None and self.spec.parent == self.metadata.name:
            raise_at(
                "Queue", ("spec", "parent"), self.spec.parent, "a queue cannot be its own parent"
            )
        check_guarantees("Queue", ("spec",), self.spec.guaranteed, self.spec.quota)
        return self


def effective_weights(
    tenant_weights: Mapping[str, float], queues: Iterable[Queue]
) -> dict[tuple[str, str], float]:
    """Each queue's weight across the cluster, by (tenant, queue): its tenant's weight (1 when
    the tenant is not in ``tenant_weights``) split among the tenant's queues in proportion to
    their own weights. The weights of one tenant's queues add up to the tenant's weight."""
    by_tenant: dict[str, list[Queue]] = defaultdict(list)
    for queue in queues:
        by_tenant[queue.tenant].append(queue)
    result: dict[tuple[str, str], float] = {}
    for tenant, members in by_tenant.items():
        total = sum(q.spec.weight for q in members)
        share = tenant_weights.get(tenant, 1.0)
        for queue in members:
            part = queue.spec.weight / total if total > 0 else 0.0
            result[(tenant, queue.name)] = share * part
    return result
