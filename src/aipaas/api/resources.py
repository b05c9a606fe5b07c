"""Resource amounts as written in manifests, and their integer form for the scheduler.

``cpu`` in cores ("500m", 2), ``memory`` in bytes ("256Mi"), ``gpu`` as a count, a fraction of
one GPU (0.5) or ``{count, fraction, model}``; extended resources by their qualified names
(``example.com/fpga: 2``, ``deviceclass.resource.kubernetes.io/<class>: 1``), served by DRA
device classes (devices/extended.py, controller/claims.py). Limits keep absurd requests out at
the door.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, cast

from pydantic import (
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, InitErrorDetails, PydanticCustomError

from aipaas.api.meta import Model, Name
from aipaas.api.quantity import QuantityStr, parse_quantity
from aipaas.api.resource_vector import Resources

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

    def total(self) -> Resources:
        """What the request holds in all, as the one resource vector (its GPUs x their share)."""
        return Resources(self.gpu_count * self.gpu_milli, self.cpu_milli, self.memory_mib)


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
#: every DeviceClass also serves ``deviceclass.resource.kubernetes.io/<its name>`` (KEP-5004)
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
#: at most this many devices of one extended resource (a DRA request's count limit)
MAX_EXTENDED_COUNT = 64
MAX_EXTENDED_RESOURCES = 8  # kinds per task, as ``claims``: each is a claim per replica

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_NOT_LABEL_CHARS = re.compile(r"[^a-z0-9]+")
_QUALIFIED = "not a qualified resource name (domain/name, such as example.com/fpga)"


def extended_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an extended resource, or None. Kubernetes' rule for a pod's
    extended resources: a qualified name (a lower-case DNS subdomain, ``/``, a name of at most
    63 characters) outside the ``kubernetes.io`` domains, except the implicit name of a
    DeviceClass, ``deviceclass.resource.kubernetes.io/<class>`` (KEP-5004)."""
    prefix, slash, rest = name.partition("/")
    if not slash or not prefix or not rest or "/" in rest:
        return _QUALIFIED
    if len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
        return f"{_QUALIFIED}: the domain must be a lower-case DNS subdomain, got {prefix!r}"
    if len(rest) > 63 or not _NAME_PART.fullmatch(rest):
        return (
            f"{_QUALIFIED}: the name after the domain must be at most 63 letters, digits, '-', "
            f"'_' or '.', starting and ending with a letter or digit, got {rest!r}"
        )
    if name.startswith(IMPLICIT_PREFIX):
        if not _DNS_SUBDOMAIN.fullmatch(rest):
            return f"{rest!r} is not a DeviceClass name (a lower-case DNS subdomain)"
        return None
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return (
            "the kubernetes.io domains are reserved for Kubernetes' own resources "
            f"(a DeviceClass is named by {IMPLICIT_PREFIX}<class>)"
        )
    if prefix.startswith("requests."):
        return "a domain starting with 'requests.' is reserved, as in Kubernetes"
    return None


def extended_claim_suffix(name: str) -> str:
    """What a task replica's compiled claim of extended resource ``name`` is called after
    ``JOB-TASK-``: the name in lower case, each run of other characters one ``-``
    (``example.com/fpga`` -> ``example-com-fpga``). It always has a ``-`` (from the ``/``), so
    it is never ``gpu``, the ``gpu:`` short form's claim."""
    return _NOT_LABEL_CHARS.sub("-", name.lower()).strip("-")


def _whole_count(value: object) -> tuple[int, str | None]:
    """A count of devices: a whole number from 0 (nothing asked) to MAX_EXTENDED_COUNT, as a
    number or a quantity string ("2"); else the reason."""
    count: int | None = None
    if isinstance(value, bool):
        count = None
    elif isinstance(value, int):
        count = value
    elif isinstance(value, float) and math.isfinite(value) and value == int(value):
        count = int(value)
    elif isinstance(value, str):
        try:
            amount = parse_quantity(value)
        except ValueError:
            amount = None
        if amount is not None and amount == int(amount):
            count = int(amount)
    if count is None:
        return 0, f"must be a whole number, got {value}"
    if count < 0:
        return 0, f"must not be negative, got {value}"
    if count > MAX_EXTENDED_COUNT:
        return 0, f"must be at most {MAX_EXTENDED_COUNT} devices, got {value}"
    return count, None


def _without_serializer(schema: CoreSchema) -> CoreSchema:
    """``schema`` (the validators around a model) with the model's own serializer and the
    reference left out, so that a JSON schema of it is made from its fields in either mode."""
    found: dict[str, Any] = {k: v for k, v in schema.items() if k not in ("serialization", "ref")}
    inner = found.get("schema")
    if found.get("type") != "model" and isinstance(inner, dict):
        found["schema"] = _without_serializer(cast(CoreSchema, inner))
    return cast(CoreSchema, found)


def _errors_at(problems: list[tuple[str, object, str]]) -> ValidationError:
    """Errors located at ``resources[<name>]`` (a ValueError in a model validator would name
    only ``resources``); the reason goes in as context so that braces in it stay text."""
    return ValidationError.from_exception_data(
        "TaskResources",
        [
            InitErrorDetails(
                type=PydanticCustomError("invalid_extended_resource", "{reason}", {"reason": why}),
                loc=(name,),
                input=value,
            )
            for name, value, why in problems
        ],
    )


class TaskResources(Model):
    """What one replica of a task needs."""

    cpu: QuantityStr = "1"
    memory: QuantityStr = "256Mi"
    gpu: GpuRequest | None = None
    claims: list[TaskClaim] = Field(default_factory=list, max_length=8)
    #: extended resources by qualified name -> whole count. On the wire they are keys of
    #: ``resources`` itself, as in a pod's requests (``example.com/fpga: 2``): parsed by
    #: ``_extended_resources``, written back by ``_extended_on_the_wire``.
    extended: dict[str, int] = Field(default_factory=dict, exclude=True)

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
        # Each extended resource compiles to a claim named by extended_claim_suffix: two
        # resources (or a resource and a claim of the task) must not end up with one name.
        taken = {claim.name: f"claims[{i}]" for i, claim in enumerate(self.claims)}
        problems: list[tuple[str, object, str]] = []
        for name, count in self.extended.items():
            suffix = extended_claim_suffix(name)
            if suffix in taken:
                problems.append(
                    (name, count, f"compiles to a claim named {suffix!r}, as {taken[suffix]} is")
                )
            taken[suffix] = f"resources[{name}]"
        if problems:
            raise _errors_at(problems)
        return self

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu(cls, value: Any) -> Any:
        return _gpu_short_form(value)

    @model_validator(mode="before")
    @classmethod
    def _extended_resources(cls, data: Any) -> Any:
        """Keys with a ``/`` are extended resources, as a pod asks for them. ``nvidia.com/gpu:
        N`` is ``gpu: N`` (served by the DeviceClass whose extendedResourceName it is, where
        one is stored); any other qualified name goes to ``extended`` with its whole count."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "extended" in data:  # not a wire field: the names are keys of resources itself
            raise _errors_at([("extended", data["extended"], "unknown field")])
        asked: dict[Any, Any] = {}
        for key in [k for k in data if isinstance(k, str) and "/" in k]:
            asked[key] = data.pop(key)
        if EXTENDED_GPU in asked:
            if "gpu" in data:
                raise ValueError(f"{EXTENDED_GPU} and gpu are two ways to ask for GPUs: give one")
            value = asked.pop(EXTENDED_GPU)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _errors_at(
                    [(EXTENDED_GPU, value, f"must be a whole number of GPUs, got {value!r}")]
                )
            data["gpu"] = value
        problems: list[tuple[str, object, str]] = []
        extended: dict[str, int] = {}
        for name, value in asked.items():
            problem = extended_name_problem(name) if isinstance(name, str) else _QUALIFIED
            count = 0
            if problem is None:
                count, problem = _whole_count(value)
            if problem is not None:
                problems.append((str(name), value, problem))
            else:
                extended[name] = count
        if len(asked) > MAX_EXTENDED_RESOURCES:
            raise ValueError(
                f"at most {MAX_EXTENDED_RESOURCES} extended resources per task, got {len(asked)}"
            )
        if problems:
            raise _errors_at(problems)
        if extended:
            data["extended"] = extended
        return data

    @model_serializer(mode="wrap")
    def _extended_on_the_wire(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The extended resources as keys of ``resources`` (as they were written), so that a
        job read back and applied again is the same job."""
        data: dict[str, Any] = handler(self)
        data.update(self.extended)
        return data

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The same shape for requests and responses (the wrap serializer alone would make the
        response schema a bare object): the fields, and the extended resources as keys with a
        ``/`` and a whole count; ``extended`` is not a wire field."""
        found = handler.resolve_ref_schema(handler(_without_serializer(schema)))
        found.get("properties", {}).pop("extended", None)
        found["patternProperties"] = {
            "/": {"type": "integer", "minimum": 0, "maximum": MAX_EXTENDED_COUNT}
        }
        return found

    def extended_asked(self) -> dict[str, int]:
        """The extended resources this task asks devices of (a count of 0 asks none)."""
        return {name: count for name, count in self.extended.items() if count > 0}

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
