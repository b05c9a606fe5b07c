"""The Scenario document of ``aipaas simulate cycle|run``: read, bounded and validated.

One YAML (or JSON) document, ``kind: Scenario`` (issue 11, "The contract outside checks rely
on"): the sim cluster's nodes, the platform's own manifests (Tenant, Queue, PriorityClass, Job,
as ``aipaas apply`` takes them), what already runs at ``now``, and for ``simulate run`` the
arrivals and durations. A top-level ``expect`` block is allowed and ignored (the scenario
cases of tests/data/scenarios keep their expected decisions there)::

    apiVersion: aipaas/v1
    kind: Scenario
    metadata: {name: reclaim-basic}
    spec:
      now: 600                  # virtual seconds (default 0); a duration text (10m) too
      profile: default          # a built-in profile or a file (relative to this one)
      nodes:                    # gpu: whole GPUs; cpu, memory: quantities (256, 2Ti default)
        - {name: n1, gpu: 8, cpu: 64, memory: 512Gi, gpuModel: H100,
           labels: {topology.aipaas.dev/rack: r1}}
      objects: [...]            # Tenant, Queue, PriorityClass, Job, User (spec.quota)
      running:                  # held in this order; GPUs: the first free ones
        - {job: t/a1, since: 0, nodes: {w-0: n1, w-1: n1}}
      arrivals: [{job: t/b1, at: 3600}]         # simulate run only
      durations: [{job: t/a1, seconds: 7200}]   # simulate run only; 2h works too
      workload: [t/a1, t/b1]    # FGD's expected pods: these jobs' replicas (default none)

Parsing is bounded as the server's (api/parsing.py): YAML through ``load_documents`` (1 MiB,
depth, node and alias bounds); JSON, the form of large generated scenarios (15,000 jobs), by
``load_json`` (depth checked, no aliases) up to ``MAX_SCENARIO_BYTES``. Every problem is an
``InvalidObject`` whose FieldErrors name the field (``spec.nodes[0].memory``,
``spec.running[0].nodes.w-9``); scenario_build.py turns the valid document into the model.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BeforeValidator, Field, ValidationError, field_validator

from aipaas.api.errors import invalid
from aipaas.api.meta import Model, Name, _check_labels
from aipaas.api.parsing import load_documents, load_json
from aipaas.api.quantity import QuantityStr, parse_quantity
from aipaas.errors import FieldError, InvalidObject, PayloadTooLarge

#: JSON scenarios may be this large (a generated 15,000-job scale scenario is a few MiB).
MAX_SCENARIO_BYTES: Final = 64 << 20
MAX_NODES: Final = 100_000
MAX_OBJECTS: Final = 200_000
_DURATION_RE: Final = re.compile(r"(?:(\d+(?:\.\d+)?)(ms|s|m|h|d))+")
_DURATION_PART: Final = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_SECONDS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def seconds(value: Any) -> float:
    """A duration: a number of seconds (``0.2``, ``7200``) or a text such as ``90s``, ``2h``,
    ``1h30m``, ``200ms``. Raises ValueError for anything else or a negative amount."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number of seconds or a duration like 2h, not {value!r}")
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str) and _DURATION_RE.fullmatch(value.strip()):
        number = sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(value.strip()))
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise ValueError(
                f"must be a number of seconds or a duration like 90s, 2h or 1h30m, not {value!r}"
            ) from None
    else:
        raise ValueError(f"must be a number of seconds or a duration like 2h, not {value!r}")
    if not number >= 0 or number == float("inf"):
        raise ValueError(f"must be a finite number of seconds >= 0, got {value!r}")
    return number


def _time_text(value: Any) -> Any:
    """A time may be written as a duration (``at: 1h``); numbers go on to the field's checks."""
    return seconds(value) if isinstance(value, str) else value


#: a virtual time in seconds, or a duration text from 0
Seconds = Annotated[float, BeforeValidator(_time_text)]


def _quantity_at_least(value: str, low: float, what: str) -> str:
    if parse_quantity(value) < low:
        raise ValueError(f"{what} must be at least {low:g}, got {value}")
    return value


class ScenarioTaint(Model):
    """A node taint, as Kubernetes writes it; ``timeAdded`` (virtual seconds) is when a
    NoExecute taint appeared, from which tolerationSeconds run (unset: at ``now``)."""

    key: str = Field(min_length=1, max_length=316)
    value: str = Field(default="", max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    time_added: Seconds | None = Field(default=None, ge=0, allow_inf_nan=False)


class ScenarioNode(Model):
    """A node of the sim cluster. cpu and memory have generous defaults, so that a GPU-only
    case need not name them (tasks ask for 1 CPU and 256Mi unless they say otherwise)."""

    name: Name
    gpu: int = Field(default=0, ge=0, le=1024)  # 8.0 reads as 8; 1.5 is refused
    cpu: QuantityStr = "256"
    memory: QuantityStr = "2Ti"
    gpu_model: str = Field(default="", max_length=64)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[ScenarioTaint] = Field(default_factory=list, max_length=16)
    #: per GPU: its memory, the UUIDs by index, the unhealthy indices, the most shares
    gpu_memory: QuantityStr | None = None
    gpu_uuids: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list, max_length=1024
    )
    unhealthy_gpus: list[Annotated[int, Field(ge=0, le=1023)]] = Field(
        default_factory=list, max_length=1024
    )
    gpu_split: int = Field(default=10, ge=1, le=1000)

    _labels = field_validator("labels")(_check_labels)

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, value: str) -> str:
        return _quantity_at_least(value, 0, "cpu")

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str) -> str:
        return _quantity_at_least(value, 0, "memory")


class Running(Model):
    """What runs at ``now``: the job's tasks on their nodes, since a virtual time; ``gpus``
    names the GPU indices a task holds (unset: the first free ones of its node)."""

    job: str = Field(min_length=3, max_length=128)
    since: Seconds = Field(default=0.0, ge=0, allow_inf_nan=False)
    nodes: dict[str, str] = Field(min_length=1)
    gpus: dict[str, list[Annotated[int, Field(ge=0, le=1023)]]] = Field(default_factory=dict)


class Arrival(Model):
    job: str = Field(min_length=3, max_length=128)
    at: Seconds = Field(ge=0, allow_inf_nan=False)


class Duration(Model):
    job: str = Field(min_length=3, max_length=128)
    seconds: float = Field(gt=0, allow_inf_nan=False)

    @field_validator("seconds", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> float:
        return seconds(value)


class ScenarioSpec(Model):
    now: Seconds = Field(default=0.0, ge=0, allow_inf_nan=False)
    profile: str = Field(default="default", min_length=1, max_length=4096)
    nodes: list[ScenarioNode] = Field(min_length=1, max_length=MAX_NODES)
    objects: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_OBJECTS)
    running: list[Running] = Field(default_factory=list)
    arrivals: list[Arrival] = Field(default_factory=list)
    durations: list[Duration] = Field(default_factory=list)
    #: the workload FGD-class scores expect, as the live controller learns it: the replicas
    #: of these jobs (tenant/name), in this order (controller/workload.py); default none
    workload: list[Annotated[str, Field(min_length=3, max_length=128)]] = Field(
        default_factory=list, max_length=MAX_OBJECTS
    )


class ScenarioMeta(Model):
    name: Name = "scenario"


class ScenarioDocument(Model):
    api_version: Literal["aipaas/v1"] = "aipaas/v1"
    kind: Literal["Scenario"]
    metadata: ScenarioMeta = Field(default_factory=ScenarioMeta)
    spec: ScenarioSpec
    #: the expected decisions of a test case: read by the tests, ignored here
    expect: Any = None


def read_scenario_text(path: str | Path) -> str:
    """The file's text (InvalidObject naming the file when it cannot be read)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise InvalidObject([FieldError("", f"cannot read {path}: {err.strerror or err}")]) from err
    if len(raw) > MAX_SCENARIO_BYTES:
        raise PayloadTooLarge(f"{path} is {len(raw)} bytes; the limit is {MAX_SCENARIO_BYTES}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InvalidObject([FieldError("", f"{path} is not UTF-8: {err}")]) from err


def parse_document(text: str) -> dict[str, Any]:
    """The one document of a scenario text, parsed with the API's bounds."""
    if text.lstrip().startswith("{"):
        data = load_json(text)
        documents = [data]
    else:
        try:
            documents = load_documents(text)
        except PayloadTooLarge as err:
            raise PayloadTooLarge(
                f"{err.message}: write a scenario this large as JSON (up to "
                f"{MAX_SCENARIO_BYTES >> 20} MiB)"
            ) from err
    if len(documents) != 1:
        raise InvalidObject(
            [FieldError("", f"a scenario is one document, this text has {len(documents)}")]
        )
    data = documents[0]
    if not isinstance(data, dict):
        raise InvalidObject([FieldError("", "a scenario must be a mapping (kind: Scenario)")])
    return data


def validate_document(data: dict[str, Any]) -> ScenarioDocument:
    """The document's shape checked; objects are checked by scenario_build.py."""
    try:
        return ScenarioDocument.model_validate(data)
    except ValidationError as err:
        raise invalid(err, what="Scenario") from err
