"""Job: tasks with replicas, started together (gang) when ``minAvailable`` of them fit."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from aipaas.api.data import DatasetMount, OutputLocation, check_mounts
from aipaas.api.duration import PositiveDuration
from aipaas.api.duration import seconds as duration_seconds
from aipaas.api.meta import LenientModel, Model, Name, Object
from aipaas.api.priority import BUILT_IN_VALUES, MAX_PRIORITY, MIN_PRIORITY
from aipaas.api.quantity import QuantityStr
from aipaas.api.resources import (
    Amounts,
    TaskResources,
    _check_cpu,
    _check_memory,
    cpu_milli,
    memory_mib,
)

MAX_REPLICAS = 1000
# The older names of ``spec.priority``: the built-in priority classes (api/priority.py).
PRIORITY_NAMES = BUILT_IN_VALUES
CANCEL_ANNOTATION = "aipaas.dev/cancel-requested"
SIM_DURATION_ANNOTATION = "sim.aipaas.dev/duration"
#: ``spec.terminationGracePeriodSeconds`` when a job does not say (Kubernetes' default)
DEFAULT_GRACE_SECONDS = 30
MAX_GRACE_SECONDS = 3600
#: ``backoffLimit`` of a task, and of a job that restarts as a gang, when it does not say
DEFAULT_BACKOFF_LIMIT = 3
#: the name of an uploaded working directory: its archive's digest
WORKDIR_PATTERN = r"^sha256-[0-9a-f]{64}$"
#: where a short topology level (``rack``) lives as a node label (``topology.aipaas.dev/rack``)
TOPOLOGY_PREFIX = "topology.aipaas.dev/"
_LABEL_KEY_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: an image reference: [registry[:port]/]path[:tag][@sha256:digest] (what podman and the
#: kubelet accept); it never starts with "-", so it can never be read as a podman option
_IMAGE_RE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$"
)
MAX_SETUP_COMMANDS = 32


class JobPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.CANCELLED)


class TaskPhase(StrEnum):
    PENDING = "Pending"
    STARTING = "Starting"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"
    LOST = "Lost"

    @property
    def finished(self) -> bool:
        return self in (TaskPhase.SUCCEEDED, TaskPhase.FAILED, TaskPhase.CANCELLED, TaskPhase.LOST)


class RestartPolicy(StrEnum):
    NEVER = "Never"
    ON_FAILURE = "OnFailure"


def _check_env(value: dict[str, str]) -> dict[str, str]:
    if len(value) > 256:
        raise ValueError("at most 256 variables")
    for key, item in value.items():
        if not _ENV_RE.fullmatch(key):
            raise ValueError(f"{key!r} is not a valid environment variable name")
        if len(item) > 32768:
            raise ValueError(f"value of {key} is longer than 32768 characters")
    return value


def _limit_cpu(value: str | None) -> str | None:
    return None if value is None else _check_cpu(value)


def _limit_memory(value: str | None) -> str | None:
    return None if value is None else _check_memory(value)


def _check_command(value: list[str]) -> list[str]:
    for index, arg in enumerate(value):
        if len(arg) > 65536:
            raise ValueError(f"argument {index} is longer than 65536 characters")
        if "\x00" in arg:
            raise ValueError(f"argument {index} contains a NUL byte")
    return value


def _check_image(value: str | None) -> str | None:
    if value is not None and (len(value) > 512 or not _IMAGE_RE.fullmatch(value)):
        raise ValueError(
            f"must be an image reference like localhost/train:1.0 or "
            f"registry.example.com/team/train@sha256:<digest>, got {value!r}"
        )
    return value


def _check_setup(value: list[str] | None) -> list[str] | None:
    for index, line in enumerate(value or []):
        if not line.strip():
            raise ValueError(f"command {index} is empty")
        if len(line) > 8192:
            raise ValueError(f"command {index} is longer than 8192 characters")
        if "\x00" in line:
            raise ValueError(f"command {index} contains a NUL byte")
    return value


class TaskLimits(Model):
    """The most a task may use, enforced where the backend can (the local one: cgroups): over
    ``memory`` it is killed (OOMKilled), over ``cpu`` it is throttled. Unset: no limit."""

    cpu: QuantityStr | None = None
    memory: QuantityStr | None = None

    _cpu = field_validator("cpu")(_limit_cpu)
    _memory = field_validator("memory")(_limit_memory)

    def amounts(self) -> tuple[int, int]:
        """(millicores, MiB), 0 for what is not limited."""
        return (
            cpu_milli(self.cpu) if self.cpu else 0,
            memory_mib(self.memory) if self.memory else 0,
        )


class TaskSpec(Model):
    name: Name
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS, strict=True)
    command: Annotated[list[str], AfterValidator(_check_command)] = Field(
        min_length=1, max_length=1024
    )
    env: Annotated[dict[str, str], AfterValidator(_check_env)] = Field(default_factory=dict)
    working_dir: str | None = Field(default=None, min_length=1, max_length=4096)
    resources: TaskResources = Field(default_factory=TaskResources)
    restart_policy: RestartPolicy = RestartPolicy.NEVER
    backoff_limit: int = Field(default=DEFAULT_BACKOFF_LIMIT, ge=0, le=100, strict=True)
    limits: TaskLimits | None = None
    # The container image the task runs in (podman on the local and Slurm backends, the pod's
    # image on Kubernetes); None: on the host, as the task's user (backends/containers.py).
    image: Annotated[str | None, AfterValidator(_check_image)] = None

    @field_validator("working_dir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError("must be an absolute path")
        return value


def _check_level(value: str) -> str:
    if len(value) > 316 or not _LABEL_KEY_RE.fullmatch(value):
        raise ValueError(
            "must be a topology level like rack (the node label topology.aipaas.dev/rack) or "
            f"a node label key like example.com/rack, got {value!r}"
        )
    return value


TopologyLevel = Annotated[str, AfterValidator(_check_level)]


def topology_label(level: str) -> str:
    """The node label key a topology level names: a short name lives under TOPOLOGY_PREFIX."""
    return level if "/" in level else TOPOLOGY_PREFIX + level


_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _check_selector(value: dict[str, str]) -> dict[str, str]:
    if len(value) > 16:
        raise ValueError("at most 16 labels")
    for key, item in value.items():
        if len(key) > 316 or not _LABEL_KEY_RE.fullmatch(key):
            raise ValueError(f"{key!r} is not a node label key (like aipaas.dev/backend)")
        if len(item) > 63 or not _LABEL_VALUE_RE.fullmatch(item):
            raise ValueError(f"the value of {key} is not a label value: {item!r}")
    return value


class Toleration(Model):
    """A Kubernetes toleration: ``Exists`` (any value; no key: every taint) or ``Equal``; no
    effect tolerates every effect."""

    key: str | None = Field(default=None, max_length=316)
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = Field(default=None, max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists")
        if self.key is None and self.operator != "Exists":
            raise ValueError("a toleration without key must have operator Exists")
        return self


class NodeSelectorRequirement(Model):
    key: str = Field(min_length=1, max_length=316)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[Annotated[str, Field(max_length=63)]] = Field(default_factory=list, max_length=64)

    @model_validator(mode="after")
    def _values_fit_operator(self) -> NodeSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"values: {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"values: must be empty for {self.operator}")
        if self.operator in ("Gt", "Lt") and (
            len(self.values) != 1 or not self.values[0].lstrip("-").isdigit()
        ):
            raise ValueError(f"values: {self.operator} needs exactly one integer")
        return self


class NodeSelectorTerm(Model):
    """Every expression (node labels) and field (``metadata.name``) must match."""

    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list, max_length=32)
    match_fields: list[NodeSelectorRequirement] = Field(default_factory=list, max_length=8)

    @field_validator("match_fields")
    @classmethod
    def _name_only(cls, value: list[NodeSelectorRequirement]) -> list[NodeSelectorRequirement]:
        for item in value:
            if item.key != "metadata.name":
                raise ValueError(f"{item.key!r}: only metadata.name is a node field")
        return value


class NodeSelector(Model):
    """Any one term must match."""

    node_selector_terms: list[NodeSelectorTerm] = Field(min_length=1, max_length=16)


class PreferredSchedulingTerm(Model):
    weight: int = Field(ge=1, le=100)
    preference: NodeSelectorTerm


class NodeAffinity(Model):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = Field(
        default_factory=list, max_length=16
    )


class Affinity(Model):
    """Kubernetes' ``affinity`` with its ``nodeAffinity`` part (pod affinity is not read)."""

    node_affinity: NodeAffinity | None = None


class Topology(Model):
    """Where a gang goes: inside one domain of a topology level, ``required`` (or wait) or
    ``preferred`` (when one can hold it). Exactly one of the two."""

    required: TopologyLevel | None = None
    preferred: TopologyLevel | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Topology:
        if (self.required is None) == (self.preferred is None):
            raise ValueError("exactly one of required or preferred must be set")
        return self


class JobSpec(Model):
    queue: Name = "default"
    # The value of the job's priority class, filled in by the server; only a platform admin may
    # give an integer of its own. ``priority: high`` is read as ``priorityClassName: high``.
    priority: int = Field(default=100, ge=MIN_PRIORITY, le=MAX_PRIORITY)
    priority_class_name: Name | None = None
    min_available: int | None = Field(default=None, ge=1, le=MAX_REPLICAS, strict=True)
    depends_on: list[Name] = Field(default_factory=list, max_length=32)
    tasks: list[TaskSpec] = Field(min_length=1, max_length=64)
    # Whether a higher-priority job may evict this one; None: the priority class decides (the
    # server stores the class's answer here, as it does the class's value in ``priority``).
    preemptible: bool | None = Field(default=None, strict=True)
    # The job is stopped at this limit (phase Failed, reason TimeLimit); backfill needs it.
    time_limit: PositiveDuration | None = None
    topology: Topology | None = None
    # Only nodes with all these labels (``aipaas.dev/backend: slurm``: a pool or backend of a
    # server that drives several); empty: the scheduler chooses among all.
    node_selector: Annotated[dict[str, str], AfterValidator(_check_selector)] = Field(
        default_factory=dict
    )
    # Node taints the tasks tolerate, and node affinity, as Kubernetes has them (None rather
    # than empty, so that a job without them is written as before).
    tolerations: list[Toleration] | None = Field(default=None, max_length=32)
    affinity: Affinity | None = None
    # Datasets the tasks read and directories uploaded when they end (api/data.py); None
    # rather than empty, so that a job without them is written as before.
    datasets: Annotated[list[DatasetMount] | None, AfterValidator(check_mounts)] = None
    outputs: list[OutputLocation] | None = Field(default=None, max_length=16)
    # A stop sends one SIGTERM, then SIGKILL this many seconds later (Kubernetes' field of the
    # same name); None: DEFAULT_GRACE_SECONDS (kept None so that a job without it is unchanged).
    termination_grace_period_seconds: int | None = Field(
        default=None, ge=0, le=MAX_GRACE_SECONDS, strict=True
    )
    # Shell commands run once per node before the job's tasks start there, in the task's
    # working directory with $AIPAAS_SETUP_DIR a directory kept for them (a per-job virtualenv:
    # ``python3 -m venv $AIPAAS_SETUP_DIR/venv``); done once per node for the same commands,
    # workdir and image (backends/setup.py). None rather than empty: a job without it is as before.
    setup: Annotated[list[str] | None, AfterValidator(_check_setup)] = Field(
        default=None, min_length=1, max_length=MAX_SETUP_COMMANDS
    )
    # An uploaded working directory (``POST /api/v1/workdirs``, what ``aipaas run --workdir``
    # does): unpacked into each task's working directory before the task starts.
    workdir: str | None = Field(default=None, pattern=WORKDIR_PATTERN)
    # The gang's restarts (JobSet's failurePolicy.maxRestarts, PyTorchJob's runPolicy):
    # OnFailure restarts every task of the job together when one fails past its own policy, at
    # most ``backoffLimit`` times for the whole job (controller/gang_restart.py); None or Never:
    # each task's own restartPolicy decides alone. None rather than Never, so that a job
    # without them is written as before.
    restart_policy: RestartPolicy | None = None
    backoff_limit: int | None = Field(default=None, ge=0, le=100, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _class_from_priority_name(cls, data: Any) -> Any:
        """``priority: high`` names the class ``high`` (unless the job names one itself)."""
        if not isinstance(data, dict):
            return data
        value = data.get("priority")
        named = "priorityClassName" in data or "priority_class_name" in data
        if isinstance(value, str) and value in PRIORITY_NAMES and not named:
            return {**data, "priorityClassName": value}
        return data

    @field_validator("priority", mode="before")
    @classmethod
    def _named_priority(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.lstrip("-").isdigit():
            if value not in PRIORITY_NAMES:
                raise ValueError(
                    f"must be an integer or one of {', '.join(PRIORITY_NAMES)}, got {value!r} "
                    "(other priority classes go in spec.priorityClassName)"
                )
            return PRIORITY_NAMES[value]
        return value

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        names = [task.name for task in self.tasks]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"tasks: duplicate task name {duplicates[0]!r}")
        total = sum(task.replicas for task in self.tasks)
        if total > MAX_REPLICAS:
            raise ValueError(f"tasks: at most {MAX_REPLICAS} replicas in all, got {total}")
        if self.min_available is not None and self.min_available > total:
            raise ValueError(
                f"minAvailable: {self.min_available} is more than the {total} replicas of the job"
            )
        if self.backoff_limit is not None and self.restart_policy is not RestartPolicy.ON_FAILURE:
            _raise_at(
                ("backoffLimit",),
                self.backoff_limit,
                "counts the gang's restarts: it needs spec.restartPolicy OnFailure",
            )
        return self

    @property
    def total_replicas(self) -> int:
        return sum(task.replicas for task in self.tasks)

    @property
    def gang_size(self) -> int:
        return self.min_available or self.total_replicas

    @property
    def restarts_as_gang(self) -> bool:
        """A failed task restarts the whole job (``spec.restartPolicy: OnFailure``)."""
        return self.restart_policy is RestartPolicy.ON_FAILURE

    @property
    def gang_backoff_limit(self) -> int:
        """How many times the whole job may restart (the tasks' default, 3, when unsaid)."""
        return DEFAULT_BACKOFF_LIMIT if self.backoff_limit is None else self.backoff_limit

    @property
    def grace_seconds(self) -> int:
        """How long a stopped task has between its SIGTERM and its SIGKILL."""
        given = self.termination_grace_period_seconds
        return DEFAULT_GRACE_SECONDS if given is None else given

    @property
    def time_limit_seconds(self) -> int | None:
        return None if self.time_limit is None else duration_seconds(self.time_limit)

    def amounts(self) -> Amounts:
        total = Amounts()
        for task in self.tasks:
            total = total + task.resources.amounts().scaled(task.replicas)
        return total


class TaskStatus(LenientModel):
    name: str
    phase: TaskPhase = TaskPhase.PENDING
    node: str | None = None
    gpus: list[int] = Field(default_factory=list)
    exit_code: int | None = None
    restarts: int = 0
    message: str = ""
    #: a GPU share's enforcement on the device: "enforced by MPS ...", "not enforced: ..."
    gpu_share: str | None = None


class JobStatus(LenientModel):
    phase: JobPhase = JobPhase.PENDING
    reason: str = ""
    message: str = ""
    tasks: list[TaskStatus] = Field(default_factory=list)
    #: the whole job's restarts (``spec.restartPolicy: OnFailure``); None: none yet
    restarts: int | None = None
    start_time: str | None = None
    completion_time: str | None = None


class Job(Object):
    plural: ClassVar[str] = "jobs"

    kind: Literal["Job"] = "Job"
    spec: JobSpec
    status: JobStatus | None = None

    @model_validator(mode="after")
    def _not_itself(self) -> Job:
        if self.metadata.name in self.spec.depends_on:
            # A ValueError here would be reported at the object's root (path ""): the error
            # is raised with its own location, so that it names the entry at fault.
            index = self.spec.depends_on.index(self.metadata.name)
            error = PydanticCustomError("self_dependency", "a job cannot depend on itself")
            raise ValidationError.from_exception_data(
                "Job",
                [
                    InitErrorDetails(
                        type=error,
                        loc=("spec", "dependsOn", index),
                        input=self.metadata.name,
                    )
                ],
            )
        return self


def _raise_at(loc: tuple[str | int, ...], value: object, message: str) -> None:
    """A validation error at ``loc`` (below the model that raises it), so that its path names
    the field at fault: a ValueError in a model validator names only the model."""
    error = PydanticCustomError("invalid_field", message)
    raise ValidationError.from_exception_data(
        "JobSpec", [InitErrorDetails(type=error, loc=loc, input=value)]
    )
