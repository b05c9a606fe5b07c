"""Resource amounts as written in manifests, and their integer form for the scheduler.

``cpu`` in cores ("500m", 2), ``memory`` in bytes ("256Mi"), ``gpu`` as a count, a fraction of
one GPU (0.5) or ``{count, fraction, model}``. Limits keep absurd requests out at the door.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from aipaas.api.meta import Model, Name
from aipaas.api.quantity import QuantityStr, parse_quantity

MAX_CPU_CORES = 4096
MAX_MEMORY_BYTES = 64 * 2**40
MAX_GPUS = 1024
MAX_TASK_GPUS = 64
MIB = 2**20
SHORT_FORM_CLAIM = "gpu"  # the name a task's ``gpu:`` claim has among its claims


@dataclass(frozen=True)
class Amounts:
    """Integer amounts: what the scheduler and quotas add up."""

    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_count: int = 0
    gpu_milli: int = 0  # per GPU; 1000 = whole

    def __add__(self, other: Amounts) -> Amounts:
        return Amounts(
            self.cpu_milli + other.cpu_milli,
            self.memory_mib + other.memory_mib,
            self.gpu_count + other.gpu_count,
            max(self.gpu_milli, other.gpu_milli),
        )

    def scaled(self, factor: int) -> Amounts:
        return Amounts(
            self.cpu_milli * factor,
            self.memory_mib * factor,
            self.gpu_count * factor,
            self.gpu_milli,
        )


# Pure functions of a short text, asked for every placed task every controller cycle.
@functools.lru_cache(maxsize=4096)
def cpu_milli(text: str) -> int:
    return math.ceil(parse_quantity(text) * 1000)


@functools.lru_cache(maxsize=4096)
def memory_mib(text: str) -> int:
    return math.ceil(parse_quantity(text) / MIB)


def _check_cpu(value: str) -> str:
    amount = parse_quantity(value)
    if amount <= 0:
        raise ValueError(f"must be more than 0 cores, got {value}")
    if amount > MAX_CPU_CORES:
        raise ValueError(f"must be at most {MAX_CPU_CORES} cores, got {value}")
    if amount * 1000 != int(amount * 1000):
        raise ValueError(f"must be a whole number of millicores, got {value}")
    return value


def _check_memory(value: str, *, allow_zero: bool = False) -> str:
    amount = parse_quantity(value)
    if amount < 0 or (amount == 0 and not allow_zero):
        raise ValueError(f"must be more than 0 bytes, got {value}")
    if amount > MAX_MEMORY_BYTES:
        raise ValueError(f"must be at most 64Ti, got {value}")
    return value


class GpuRequest(Model):
    """GPUs of one task: ``count`` whole GPUs, or one GPU shared by ``fraction``, or a share of
    each of ``count`` GPUs by memory and cores (HAMi's form: ``memory`` or ``memoryPercent``,
    ``cores``; also by ``uuids`` or ``indices``)."""

    count: int = Field(default=1, ge=0, le=MAX_TASK_GPUS, strict=True)
    fraction: float | None = Field(default=None, gt=0, le=1)
    model: str | None = Field(default=None, min_length=1, max_length=64)
    #: per GPU: whole GPUs with at least this much memory; in a share, the memory it takes
    memory: QuantityStr | None = None
    #: a share: this percent of each GPU's memory
    memory_percent: int | None = Field(default=None, ge=1, le=100, strict=True)
    #: a share: this percent of each GPU's compute (100: the GPU unshared)
    cores: int | None = Field(default=None, ge=0, le=100, strict=True)
    #: a share on GPUs of these UUIDs (or indices) only
    uuids: list[Annotated[str, Field(min_length=1, max_length=128)]] | None = Field(
        default=None, min_length=1, max_length=64
    )
    indices: list[Annotated[int, Field(ge=0, le=1023)]] | None = Field(
        default=None, min_length=1, max_length=64
    )

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str | None) -> str | None:
        return None if value is None else _check_memory(value)

    @model_validator(mode="after")
    def _fraction_needs_one(self) -> GpuRequest:
        if self.fraction is not None and self.fraction < 1:
            if self.count != 1:
                raise ValueError("a fraction of a GPU needs count 1")
            if round(self.fraction * 1000) < 1:
                raise ValueError("fraction must be at least 0.001")
        if self.memory is not None and self.memory_percent is not None:
            raise ValueError("memory and memoryPercent are two ways to say one thing: give one")
        if self.fraction is not None and self.cores is not None:
            raise ValueError("fraction and cores are two ways to say one thing: give one")
        if self.uuids is not None and self.indices is not None:
            raise ValueError("uuids and indices are two ways to name GPUs: give one")
        named = self.uuids or self.indices
        if named is not None and len(set(named)) < self.count:
            raise ValueError(f"names {len(set(named))} GPUs, fewer than count {self.count}")
        if self.is_share and self.count < 1:
            raise ValueError("a GPU share needs count >= 1")
        return self

    @property
    def is_share(self) -> bool:
        """A share of each GPU by memory and cores (not whole GPUs, not a milli fraction)."""
        return (
            self.cores is not None
            or self.memory_percent is not None
            or self.uuids is not None
            or self.indices is not None
            or (self.fraction is not None and self.fraction < 1 and self.memory is not None)
        )

    @property
    def milli(self) -> int:
        """Per GPU, thousandths of its compute (a share takes at least 1: see gpu_share.py)."""
        if self.cores is not None:
            return max(self.cores * 10, 1)
        if self.fraction is not None:
            return round(self.fraction * 1000)
        return 1 if self.is_share else 1000


def _gpu_short_form(value: Any) -> Any:
    """``gpu: 2`` -> count 2; ``gpu: 0.5`` -> one GPU, half of it."""
    if isinstance(value, bool):
        raise ValueError("must be a number or an object, not a boolean")
    if isinstance(value, int):
        return {"count": value}
    if isinstance(value, float):
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"must be a positive number, got {value}")
        if value < 1:
            return {"count": 1, "fraction": value}
        if value != int(value):
            raise ValueError("more than one GPU must be a whole number")
        return {"count": int(value)}
    if isinstance(value, str):
        raise ValueError("must be a number or an object like {count: 1, model: H100}")
    return value


class TaskClaim(Model):
    """A DRA claim the task uses: a ResourceClaim of the job's tenant by name, or a
    ResourceClaimTemplate from which each replica gets its own claim (as a Kubernetes pod's
    ``resourceClaims``)."""

    name: Name
    resource_claim_name: str | None = Field(default=None, min_length=1, max_length=253)
    resource_claim_template_name: str | None = Field(default=None, min_length=1, max_length=253)

    @model_validator(mode="after")
    def _one_source(self) -> TaskClaim:
        if (self.resource_claim_name is None) == (self.resource_claim_template_name is None):
            raise ValueError(
                "exactly one of resourceClaimName or resourceClaimTemplateName must be set"
            )
        return self


#: the extended resource name of a GPU (a Kubernetes pod's ``nvidia.com/gpu``)
EXTENDED_GPU = "nvidia.com/gpu"


class TaskResources(Model):
    """What one replica of a task needs."""

    cpu: QuantityStr = "1"
    memory: QuantityStr = "256Mi"
    gpu: GpuRequest | None = None
    claims: list[TaskClaim] = Field(default_factory=list, max_length=8)

    _cpu = field_validator("cpu")(_check_cpu)
    _memory = field_validator("memory")(_check_memory)

    @model_validator(mode="after")
    def _short_form_name_free(self) -> TaskResources:
        # ``gpu`` compiles to a claim the task knows as "gpu" (see devices/shortform.py).
        if self.gpu is not None and self.gpu.count:
            for index, claim in enumerate(self.claims):
                if claim.name == SHORT_FORM_CLAIM:
                    raise ValueError(
                        f"claims[{index}].name: {SHORT_FORM_CLAIM!r} is the claim that gpu "
                        "compiles to; name this claim otherwise"
                    )
        return self

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu(cls, value: Any) -> Any:
        return _gpu_short_form(value)

    @model_validator(mode="before")
    @classmethod
    def _extended_gpu(cls, data: Any) -> Any:
        """``nvidia.com/gpu: N``, the extended resource as a pod asks for it, is ``gpu: N``
        (served by the DeviceClass whose extendedResourceName it is, where one is stored)."""
        if not isinstance(data, dict) or EXTENDED_GPU not in data:
            return data
        data = dict(data)
        value = data.pop(EXTENDED_GPU)
        if "gpu" in data:
            raise ValueError(f"{EXTENDED_GPU} and gpu are two ways to ask for GPUs: give one")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{EXTENDED_GPU}: must be a whole number of GPUs, got {value!r}")
        data["gpu"] = value
        return data

    def amounts(self) -> Amounts:
        gpu = self.gpu
        return Amounts(
            cpu_milli(self.cpu),
            memory_mib(self.memory),
            gpu.count if gpu else 0,
            gpu.milli if gpu and gpu.count else 0,
        )


class Quota(Model):
    """Upper bounds; a missing entry means no bound."""

    gpu: float | None = Field(default=None, ge=0, le=MAX_GPUS * 100)
    cpu: QuantityStr | None = None
    memory: QuantityStr | None = None
    #: GPU memory in bytes (where GPUs are shared by fractions), as ``memory``
    gpu_memory: QuantityStr | None = None

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, value: str | None) -> str | None:
        if value is None:
            return None
        amount = parse_quantity(value)
        if amount < 0:
            raise ValueError(f"must not be negative, got {value}")
        if amount > 10**7:
            raise ValueError(f"must be at most 10000000 cores, got {value}")
        return value

    @field_validator("memory", "gpu_memory")
    @classmethod
    def _memory(cls, value: str | None) -> str | None:
        if value is None:
            return None
        amount = parse_quantity(value)
        if amount < 0:
            raise ValueError(f"must not be negative, got {value}")
        if amount > Decimal(2**70):
            raise ValueError(f"must be at most 1Zi, got {value}")
        return value

    def gpu_milli(self) -> int | None:
        return None if self.gpu is None else round(self.gpu * 1000)

    def cpu_milli(self) -> int | None:
        return None if self.cpu is None else cpu_milli(self.cpu)

    def memory_mib(self) -> int | None:
        return None if self.memory is None else memory_mib(self.memory)

    def gpu_memory_mib(self) -> int | None:
        return None if self.gpu_memory is None else memory_mib(self.gpu_memory)
