"""NodePool (issue 14): a set of like nodes the platform grows when pending work cannot fit and
shrinks when nodes stay idle, on one backend (sim, slurm, or a cloud provider's API).

Cluster-wide; only a platform admin writes pools (server/service.py). ``spec.size`` is the
size an admin asked for (``aipaas nodepool scale NAME --size N``): while it is set the pool
holds that many nodes; unset, the autoscaler (autoscale/pool_plan.py) decides between
``minSize`` and ``maxSize``. ``lending`` lends the pool's idle GPUs to a spot tier.
"""

from __future__ import annotations

from typing import ClassVar, Final, Literal

from pydantic import Field, field_validator, model_validator

from aipaas.api.duration import Duration, seconds
from aipaas.api.meta import LenientModel, Model, Name, Object
from aipaas.api.quantity import QuantityStr
from aipaas.api.queue import raise_at
from aipaas.api.resources import _check_cpu, _check_memory, cpu_milli, memory_mib

MAX_POOL_NODES: Final = 10_000
MAX_NODE_GPUS: Final = 64
#: the label every node of a pool carries: the pool's name
POOL_LABEL: Final = "aipaas.dev/pool"


class PoolGpus(Model):
    count: int = Field(default=0, ge=0, le=MAX_NODE_GPUS, strict=True)
    model: str = Field(default="", max_length=64)
    #: memory of one GPU
    memory: QuantityStr | None = None

    @model_validator(mode="after")
    def _model_with_gpus(self) -> PoolGpus:
        if self.count and not self.model:
            raise_at("PoolGpus", ("model",), self.model, "required when count is more than 0")
        return self


class NodeShape(Model):
    """What each node of the pool offers."""

    cpu: QuantityStr
    memory: QuantityStr
    gpus: PoolGpus = Field(default_factory=PoolGpus)
    #: labels every node of the pool carries (besides aipaas.dev/pool)
    labels: dict[str, str] = Field(default_factory=dict, max_length=32)

    _cpu = field_validator("cpu")(_check_cpu)
    _memory = field_validator("memory")(_check_memory)

    @property
    def cpu_milli(self) -> int:
        return cpu_milli(self.cpu)

    @property
    def memory_mib(self) -> int:
        return memory_mib(self.memory)

    @property
    def gpu_memory_mib(self) -> int:
        return memory_mib(self.gpus.memory) if self.gpus.memory else 0


class Lending(Model):
    """Lend the pool's idle GPUs to the spot tier: spot jobs run there at ``spotPricePerGpuHour``
    and are evicted (after ``gracePeriod``) when the lender's own work needs the GPUs, at most
    ``reclaimWithin`` after it arrives."""

    enabled: bool = False
    #: the tenant whose guaranteed GPUs these are and who is credited (None: the platform)
    lender: Name | None = None
    #: the priority class of spot work (a preemptible class of the lowest value, made by an
    #: admin): its usage on this pool's nodes is lent capacity
    spot_priority_class: Name = "spot"
    spot_price_per_gpu_hour: float = Field(default=0.0, ge=0, le=1_000_000)
    grace_period: Duration = "30s"
    reclaim_within: Duration = "2m"

    @model_validator(mode="after")
    def _grace_within_reclaim(self) -> Lending:
        if seconds(self.grace_period) > seconds(self.reclaim_within):
            raise_at(
                "Lending",
                ("gracePeriod",),
                self.grace_period,
                f"must not be longer than reclaimWithin ({self.reclaim_within}): a spot task "
                "is stopped within its grace period, and the lender gets the GPUs back in time",
            )
        return self


class NodePoolSpec(Model):
    backend: str = Field(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9-]*$")
    node: NodeShape
    min_size: int = Field(default=0, ge=0, le=MAX_POOL_NODES, strict=True)
    max_size: int = Field(ge=0, le=MAX_POOL_NODES, strict=True)
    #: the size an admin set (scale); None: the autoscaler decides within min and max
    size: int | None = Field(default=None, ge=0, le=MAX_POOL_NODES, strict=True)
    #: how long a new node takes to become ready
    provisioning_delay: Duration = "60s"
    #: a node with nothing running this long is drained and removed
    idle_threshold: Duration = "10m"
    price_per_hour: float = Field(default=0.0, ge=0, le=1_000_000)
    lending: Lending = Field(default_factory=Lending)


class PoolNodeStatus(LenientModel):
    name: str
    #: Provisioning, Ready, Draining
    state: str
    since: str | None = None


class NodePoolStatus(LenientModel):
    """What the controller's last cycle saw and did (controller/pools.py)."""

    size: int = 0
    ready: int = 0
    provisioning: int = 0
    draining: int = 0
    #: the size the autoscaler aims for now
    target: int = 0
    nodes: list[PoolNodeStatus] = Field(default_factory=list)
    last_scale_time: str | None = None
    message: str = ""


class NodePool(Object):
    namespaced: ClassVar[bool] = False
    plural: ClassVar[str] = "nodepools"

    kind: Literal["NodePool"] = "NodePool"
    spec: NodePoolSpec
    status: NodePoolStatus | None = None

    @model_validator(mode="after")
    def _sizes(self) -> NodePool:
        spec = self.spec
        if spec.min_size > spec.max_size:
            raise_at(
                "NodePool",
                ("spec", "minSize"),
                spec.min_size,
                f"must not be more than maxSize ({spec.max_size})",
            )
        if spec.size is not None and not spec.min_size <= spec.size <= spec.max_size:
            raise_at(
                "NodePool",
                ("spec", "size"),
                spec.size,
                f"must be between minSize ({spec.min_size}) and maxSize ({spec.max_size})",
            )
        if spec.lending.enabled and spec.node.gpus.count == 0:
            raise_at(
                "NodePool",
                ("spec", "lending", "enabled"),
                True,
                "a pool without GPUs has none to lend",
            )
        return self


POOL_KINDS: tuple[type[Object], ...] = (NodePool,)
