"""Service (issue 14): a long-running inference server of several replicas behind an entry point.

Each replica is an HTTP server that listens on the port it is given in ``$PORT``; the platform
materialises every replica as a one-task Job owned by the service (controller/services.py), so
replicas wait in the service's queue, count against its quotas and fair share, and run at its
priority like any job. The entry point (server/entry.py, ``/services/<tenant>/<name>/``)
balances requests over the ready replicas and measures the load that autoscaling reads.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from aipaas.api.job import _check_command, _check_env, _check_selector
from aipaas.api.meta import LenientModel, Model, Name, Object
from aipaas.api.resources import TaskResources
from aipaas.api.service_scaling import Autoscaling, ScheduledMinimum

MAX_SERVICE_REPLICAS = 1000
#: ``healthCheck``'s period when it gives none (Kubernetes' probes default to 10 s)
HEALTH_CHECK_PERIOD_SECONDS = 2.0
_PERCENT_RE = re.compile(r"(\d{1,3})%")
#: labels and annotations the platform puts on a service's replica jobs
SERVICE_LABEL = "aipaas.dev/service"
REVISION_LABEL = "aipaas.dev/service-revision"
PORT_ANNOTATION = "aipaas.dev/service-port"
#: on a replica's job: an eviction (preemption, a lending pool's reclaim) takes the replica out
#: of the endpoints at once and sends its SIGTERM this many seconds later (controller/stop_drain.py)
EVICTION_DRAIN_ANNOTATION = "aipaas.dev/eviction-drain-seconds"


class HttpHeader(Model):
    name: str = Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
    value: str = Field(max_length=4096, pattern=r"^[^\r\n\x00]*$")


class HttpGetAction(Model):
    """An HTTP GET of ``path``: a status of 200 to 399 within the timeout passes."""

    path: str = Field(default="/", min_length=1, max_length=1024)
    #: unset: the replica's own port (``$PORT``)
    port: int | None = Field(default=None, ge=1, le=65535, strict=True)
    scheme: Literal["HTTP", "HTTPS"] = "HTTP"
    http_headers: list[HttpHeader] = Field(default_factory=list, max_length=16)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/") or any(c.isspace() or ord(c) < 32 for c in value):
            raise ValueError(f"must be an absolute URL path without spaces, got {value!r}")
        return value


class TcpSocketAction(Model):
    """A TCP connection to the port within the timeout passes."""

    port: int | None = Field(default=None, ge=1, le=65535, strict=True)


class ExecAction(Model):
    """A command run beside the replica, as its user, in its environment and working
    directory: exit code 0 within the timeout passes (local backend; another backend reports
    the probe as failing with why)."""

    command: Annotated[list[str], AfterValidator(_check_command)] = Field(
        min_length=1, max_length=256
    )


class Probe(Model):
    """A Kubernetes probe: one of ``httpGet``, ``tcpSocket`` or ``exec`` (``path`` alone is the
    short form of ``httpGet``), with Kubernetes' timing and thresholds and their defaults."""

    http_get: HttpGetAction | None = None
    tcp_socket: TcpSocketAction | None = None
    exec_: ExecAction | None = Field(default=None, alias="exec")
    initial_delay_seconds: float = Field(default=0.0, ge=0, le=3600)
    period_seconds: float = Field(default=10.0, gt=0, le=3600)
    timeout_seconds: float = Field(default=1.0, gt=0, le=600)
    failure_threshold: int = Field(default=3, ge=1, le=10000, strict=True)
    success_threshold: int = Field(default=1, ge=1, le=10000, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        """``{path: /health}`` (the first form of aipaas's probes) is an HTTP GET of it."""
        if isinstance(data, dict) and "path" in data:
            rest = {k: v for k, v in data.items() if k != "path"}
            if {"httpGet", "http_get"} & set(rest):
                raise ValueError("path: give path or httpGet, not both")
            return {**rest, "httpGet": {"path": data["path"]}}
        return data

    @model_validator(mode="after")
    def _one_action(self) -> Probe:
        given = [
            name
            for name, action in (
                ("httpGet", self.http_get),
                ("tcpSocket", self.tcp_socket),
                ("exec", self.exec_),
            )
            if action is not None
        ]
        if len(given) != 1:
            found = ", ".join(given) if given else "none"
            raise ValueError(f"give exactly one of httpGet, tcpSocket, exec (found {found})")
        return self

    @property
    def action(self) -> str:
        if self.http_get is not None:
            return f"HTTP GET {self.http_get.path}"
        if self.tcp_socket is not None:
            return "TCP connection"
        return "exec"


def _check_budget(value: int | str) -> int | str:
    if isinstance(value, str):
        match = _PERCENT_RE.fullmatch(value)
        if match is None or int(match.group(1)) > 100:
            raise ValueError(
                f"must be a number of replicas or a percentage like 25%, got {value!r}"
            )
    return value


Budget = Annotated[int | str, AfterValidator(_check_budget)]


def budget_replicas(value: int | str, replicas: int, *, round_up: bool) -> int:
    """A surge or unavailable budget in replicas (percentages of ``replicas``; Kubernetes
    rounds a surge up and an unavailability down)."""
    if isinstance(value, int):
        return value
    share = int(value.rstrip("%")) * replicas / 100
    return math.ceil(share) if round_up else math.floor(share)


class RollingUpdate(Model):
    """A changed template replaces replicas a few at a time: at most ``maxSurge`` replicas
    above the desired count, at most ``maxUnavailable`` of them not ready."""

    max_surge: Budget = Field(default=1)
    max_unavailable: Budget = Field(default=0)

    @field_validator("max_surge", "max_unavailable", mode="before")
    @classmethod
    def _non_negative(cls, value: Any) -> Any:
        if isinstance(value, bool) or (isinstance(value, int) and not 0 <= value <= 1000):
            raise ValueError(f"must be 0 to 1000 replicas or a percentage, got {value!r}")
        return value

    @model_validator(mode="after")
    def _progress(self) -> RollingUpdate:
        if self.max_surge in (0, "0%") and self.max_unavailable in (0, "0%"):
            raise ValueError("maxSurge and maxUnavailable cannot both be 0: nothing could change")
        return self


class ReplicaTemplate(Model):
    """What each replica runs: one process that serves HTTP on ``$PORT``."""

    command: Annotated[list[str], AfterValidator(_check_command)] = Field(
        min_length=1, max_length=1024
    )
    env: Annotated[dict[str, str], AfterValidator(_check_env)] = Field(default_factory=dict)
    working_dir: str | None = Field(default=None, min_length=1, max_length=4096)
    resources: TaskResources = Field(default_factory=TaskResources)
    #: until it passes once, no other probe runs; failing ``failureThreshold`` times restarts
    startup_probe: Probe | None = None
    #: a replica is sent requests only while this passes (none: while its port takes a TCP
    #: connection)
    readiness_probe: Probe | None = None
    #: failing ``failureThreshold`` times (once started) restarts the replica
    liveness_probe: Probe | None = None
    #: the first form of aipaas's probes: a readiness probe where none is given (it never
    #: restarts a replica; its period stays 2 s unless given)
    health_check: Probe | None = None
    # A replica that ends is always replaced (by the service's controller): the only policy.
    restart_policy: Literal["Always"] = "Always"

    @field_validator("restart_policy", mode="before")
    @classmethod
    def _always(cls, value: Any) -> Any:
        if value != "Always":
            raise ValueError(
                f"a service's replicas always restart: Always is the only policy, got {value!r} "
                "(Never and OnFailure are for jobs)"
            )
        return value

    @field_validator("working_dir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError("must be an absolute path")
        return value

    @field_validator("health_check", mode="before")
    @classmethod
    def _health_check_period(cls, value: Any) -> Any:
        if isinstance(value, dict) and not {"periodSeconds", "period_seconds"} & set(value):
            return {**value, "periodSeconds": HEALTH_CHECK_PERIOD_SECONDS}
        return value

    @property
    def readiness(self) -> Probe | None:
        """The readiness probe: ``readinessProbe``, else ``healthCheck``."""
        return self.readiness_probe or self.health_check

    @field_validator("env")
    @classmethod
    def _port_is_given(cls, value: dict[str, str]) -> dict[str, str]:
        if "PORT" in value:
            raise ValueError("PORT is set by the platform: each replica gets its own port")
        return value


class ServiceSpec(Model):
    queue: Name = "default"
    # None: the tenant's default class; the value is resolved for each replica job.
    priority_class_name: Name | None = None
    # Inference is usually not preempted by batch work: replicas are not, unless this says.
    preemptible: bool = Field(default=False, strict=True)
    min_replicas: int = Field(default=1, ge=0, le=MAX_SERVICE_REPLICAS, strict=True)
    max_replicas: int | None = Field(default=None, ge=1, le=MAX_SERVICE_REPLICAS, strict=True)
    template: ReplicaTemplate
    #: the port each replica listens on; unset (the usual): aipaas gives each replica a free
    #: one, so that replicas share a machine. Either way the replica finds it in ``$PORT``.
    port: int | None = Field(default=None, ge=1024, le=65535, strict=True)
    node_selector: Annotated[dict[str, str], AfterValidator(_check_selector)] = Field(
        default_factory=dict
    )
    rolling_update: RollingUpdate = Field(default_factory=RollingUpdate)
    autoscaling: Autoscaling | None = None
    scheduled_minimums: list[ScheduledMinimum] = Field(default_factory=list, max_length=32)
    #: the entry point answers anyone, without a token
    public: bool = Field(default=False, strict=True)
    #: how long a replica has to answer a request it was sent (then 504)
    request_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    #: how long the entry point holds a request while no replica is ready (a cold start from
    #: zero, a replica starting): then 503 with Retry-After
    queue_timeout_seconds: float = Field(default=300.0, gt=0, le=3600)
    #: a replica taken out of the endpoints is stopped this much later (its requests finish)
    drain_seconds: float = Field(default=5.0, ge=0, le=3600)
    #: what an eviction of a preemptible replica does (a preemptor, or a lending pool's owner
    #: taking its GPUs back): Drain takes it out of the endpoints at once and stops it
    #: ``drainSeconds`` later (at most its grace period), so its requests in flight finish;
    #: Stop stops it at once, as any evicted task
    on_eviction: Literal["Drain", "Stop"] = "Drain"

    @model_validator(mode="before")
    @classmethod
    def _replicas_short_form(cls, data: Any) -> Any:
        """``replicas: 3`` (fixed) or ``replicas: {min: 0, max: 4}`` for minReplicas and
        maxReplicas."""
        if not isinstance(data, dict) or "replicas" not in data:
            return data
        rest = {k: v for k, v in data.items() if k != "replicas"}
        if {"minReplicas", "maxReplicas", "min_replicas", "max_replicas"} & set(rest):
            raise ValueError("replicas: give replicas or minReplicas/maxReplicas, not both")
        value = data["replicas"]
        if isinstance(value, int) and not isinstance(value, bool):
            return {**rest, "minReplicas": value, "maxReplicas": max(value, 1)}
        if isinstance(value, dict) and set(value) <= {"min", "max"}:
            found = {"minReplicas": value.get("min", 1), "maxReplicas": value.get("max")}
            return {**rest, **{k: v for k, v in found.items() if v is not None}}
        raise ValueError(
            f"replicas: must be a number of replicas or {{min: N, max: M}}, got {value!r}"
        )

    @property
    def replica_limit(self) -> int:
        """maxReplicas, or minReplicas (at least 1) when it is not given."""
        return self.max_replicas if self.max_replicas is not None else max(self.min_replicas, 1)

    def revision(self) -> str:
        """A short hash of what each replica runs: a change starts a rolling update."""
        text = json.dumps(self.template.model_dump(mode="json"), sort_keys=True)
        text += json.dumps([self.node_selector, self.port], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]


class Endpoint(LenientModel):
    """One replica the entry point may send requests to."""

    replica: str
    address: str
    port: int
    revision: str = ""


class ReplicaRecord(LenientModel):
    """The controller's record of one replica job (its memory across restarts)."""

    job: str
    revision: str
    port: int
    created_at: float  # seconds since the epoch
    node: str = ""
    address: str = ""
    ready: bool = False
    #: taken out of the endpoints at this time; its job is cancelled at ``stop_at``
    draining_since: float | None = None
    stop_at: float | None = None
    stop_asked: bool = False
    why: str = ""
    #: its startup probe passed (or it has none) and it runs: readiness and liveness apply
    started: bool = False
    #: Pending (not placed or not running yet), Starting (startup probe), NotReady, Ready,
    #: Draining; ``message`` says why it is not ready
    state: str = "Pending"
    message: str = ""


class CrashLoop(LenientModel):
    """Replicas of the service that failed in a row (exited, or killed by a probe) and the
    back-off before the next start (Kubernetes' CrashLoopBackOff: 10 s doubling to 5 min,
    reset after 10 min of running)."""

    replica: str
    restarts: int
    reason: str
    last_exit_code: int | None = None
    log_tail: str = ""
    next_start: str = ""  # ISO time
    back_off_seconds: float = 0.0


class ServiceStatus(LenientModel):
    phase: str = "Pending"  # Pending, Running (a replica ready), Idle (scaled to zero)
    reason: str = ""
    message: str = ""
    revision: str = ""
    desired_replicas: int = 0
    replicas: int = 0
    ready_replicas: int = 0
    updated_replicas: int = 0
    endpoints: list[Endpoint] = Field(default_factory=list)
    url: str = ""
    last_scale_time: str | None = None
    replica_jobs: list[ReplicaRecord] = Field(default_factory=list)
    crash_loop: CrashLoop | None = None


class Service(Object):
    plural: ClassVar[str] = "services"

    kind: Literal["Service"] = "Service"
    spec: ServiceSpec
    status: ServiceStatus | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Service:
        """Checks across fields, each reported at the field at fault."""
        spec = self.spec
        top = spec.replica_limit
        if top < spec.min_replicas:
            _refuse(("maxReplicas",), f"{top} is less than minReplicas ({spec.min_replicas})")
        for index, scheduled in enumerate(spec.scheduled_minimums):
            if scheduled.replicas > top:
                _refuse(
                    ("scheduledMinimums", index, "replicas"),
                    f"{scheduled.replicas} is more than maxReplicas ({top})",
                )
        for field_name, probe in (
            ("startupProbe", spec.template.startup_probe),
            ("livenessProbe", spec.template.liveness_probe),
        ):
            if probe is not None and probe.success_threshold != 1:
                _refuse(
                    ("template", field_name, "successThreshold"),
                    f"must be 1 for a {field_name} (Kubernetes' rule), got "
                    f"{probe.success_threshold}",
                )
        if spec.min_replicas == 0 and spec.autoscaling is None:
            _refuse(
                ("minReplicas",),
                "0 scales to zero only with spec.autoscaling (which brings the service back "
                "when requests come); give spec.autoscaling or minReplicas >= 1",
            )
        return self


def _refuse(loc: tuple[str | int, ...], message: str) -> None:
    error = PydanticCustomError("service", message)
    raise ValidationError.from_exception_data(
        "Service", [InitErrorDetails(type=error, loc=("spec", *loc), input=None)]
    )


class LoadSample(LenientModel):
    """One server process's measurement of a service (server/entry_load.py)."""

    at: float  # seconds since the epoch
    in_flight: int = 0
    #: of those in flight, requests waiting for a ready replica now
    waiting: int = 0
    concurrency: float = 0.0  # requests in flight, averaged over the sample's interval
    rate: float = 0.0  # requests per second over the interval
    requests: int = 0  # requests this process answered since the service was last quiet


class ServiceLoadStatus(LenientModel):
    #: by server process: each entry point writes its own sample, the autoscaler adds them up
    samples: dict[str, LoadSample] = Field(default_factory=dict)


class ServiceLoad(Object):
    """The load the entry points measured for the service of the same name. Written by the
    server processes (not by users: read-only through the API), read by the autoscaler."""

    plural: ClassVar[str] = "serviceloads"

    kind: Literal["ServiceLoad"] = "ServiceLoad"
    spec: LenientModel = Field(default_factory=LenientModel)
    status: ServiceLoadStatus | None = None


SERVICE_KINDS: tuple[type[Object], ...] = (Service, ServiceLoad)
