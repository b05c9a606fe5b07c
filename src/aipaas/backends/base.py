"""The backend interface: where tasks really run.

Assumptions every backend states and the controller relies on (after Ray's instance provider):
- ``start`` is idempotent by ``request_id``: asking twice never runs a task twice.
- ``status`` is level-triggered: it reports what is true now for the ids asked about, including
  tasks started by an earlier process of the server (backends keep their records on disk).
- ``stop`` is asynchronous: the task ends later and ``status`` then reports it.
- Failures are data (``TaskState.LOST``, exit codes), not exceptions, except for bugs. A
  backend that cannot be asked (a remote one unreachable) may raise from ``inventory`` or
  ``status``: the controller takes that as "unknown", never as "gone" or "lost".
- ``start`` carries the controller lease's fencing token; a backend that keeps state refuses
  (``FencingRefused``) a token lower than the highest it has seen (backends/fencing.py).
Backends import neither the store, the scheduler nor the server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, cast

from aipaas.api.devices import ResourceClaim, ResourceSlice
from aipaas.backends.datasets import DatasetMount, OutputUpload

#: where a job's MASTER_PORT is chosen: below the service replicas' ports (30000-32767) and
#: the kernel's ephemeral ports (32768 on)
MASTER_PORTS = range(20000, 30000)


@dataclass(frozen=True)
class NodeInfo:
    """A machine as a backend reports it."""

    name: str
    backend: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_model: str = ""
    gpu_memory_mib: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    #: what the backend wants an operator to see on the Node (how tasks are isolated, a GPU
    #: discovery error); stored as the Node's annotations
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[NodeInfo, ...]
    features: frozenset[str] = frozenset()
    slices: tuple[ResourceSlice, ...] = ()  # DRA devices per node, where the backend has them
    #: nodes in ``nodes`` whose state could not be read now (their backend failed to answer):
    #: known to exist, not ready; nothing new goes there and their tasks are not given up
    unknown: frozenset[str] = frozenset()
    #: False when part of the backend could not be read at all: a node missing from ``nodes``
    #: may still exist (a composite whose member failed before it ever answered)
    complete: bool = True
    #: (driver, pool, device) -> the conditions its driver set on it in a claim's
    #: status.devices (a Kubernetes DRA driver's binding conditions: devices/binding.py)
    device_conditions: Mapping[tuple[str, str, str], tuple[Mapping[str, Any], ...]] = field(
        default_factory=dict
    )
    #: allocations made by others (another scheduler sharing a Kubernetes cluster): the
    #: device ledger holds what they hold, as it holds what aipaas's own claims hold
    held_elsewhere: tuple[ResourceClaim, ...] = ()


class FencingRefused(Exception):
    """A start from a controller whose lease was taken over (its fencing token is stale)."""


@dataclass(frozen=True)
class ClaimDevice:
    """A device a task's claims were given (as in a claim's ``status.allocation``)."""

    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class LaunchRequest:
    """Everything needed to start one task replica on its node."""

    request_id: str
    task: str  # worker-0
    job: str
    tenant: str
    node: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    working_dir: str | None
    gpus: tuple[int, ...]
    gpu_milli: int
    log_path: str
    duration_seconds: float | None = None  # for the simulator only
    annotations: Mapping[str, str] = field(default_factory=dict)  # the job's
    #: the devices of the task's claims; a backend that runs on GPUs pins the task to them
    #: (when empty, ``gpus`` are its GPUs: the count-based path)
    devices: tuple[ClaimDevice, ...] = ()
    #: the controller lease's fencing token (None: a controller without a lease, in tests)
    fencing_token: int | None = None
    #: the job asked for simulated nodes (``sim.aipaas.dev/duration``); a backend that mixes
    #: real and simulated nodes starts a task on a simulated one only then
    simulated: bool = False
    #: what the task asked for (0: unknown); a backend with its own scheduler (Slurm) asks it
    #: for as much, so that it does not give the task a whole node
    cpu_milli: int = 0
    memory_mib: int = 0
    #: the task's allocated claims as resource.k8s.io/v1 ResourceClaim documents (metadata.name,
    #: spec, status.allocation), for a backend that writes them into its engine (Kubernetes)
    claims: tuple[Mapping[str, Any], ...] = ()
    #: the job's labels (a backend whose engine has labels puts them on the task: Kubernetes)
    labels: Mapping[str, str] = field(default_factory=dict)
    #: the datasets the task reads (backends/datasets.py); a backend without a cache ignores them
    datasets: tuple[DatasetMount, ...] = ()
    #: directories the task writes, uploaded when it ends (backends/datasets.py)
    outputs: tuple[OutputUpload, ...] = ()
    #: a stop's SIGTERM is followed by SIGKILL this many seconds later (the job's
    #: ``terminationGracePeriodSeconds``); None: the ``grace_seconds`` the stop is given
    grace_seconds: float | None = None
    #: names the task's working directory across its attempts (the same for every restart of
    #: one task of one job): a backend that keeps it gives each attempt on the node the same
    #: directory, in ``AIPAAS_WORKDIR``; None: a directory of the attempt's own
    work_key: str | None = None
    #: the job's uid (names what the tasks of one job share on a node: the chosen MASTER_PORT)
    job_uid: str = ""
    #: the job's uploaded working directory (``spec.workdir``: ``sha256-<hex>``), unpacked
    #: into the task's working directory before it starts; None: nothing to unpack
    workdir_archive: str | None = None
    #: the task's ``limits`` (0: none): a backend that can enforces them (local: cgroups)
    limit_cpu_milli: int = 0
    limit_memory_mib: int = 0
    #: the task's container image (``spec.tasks[].image``): a backend that runs containers runs
    #: the task in it (backends/containers.py), one that cannot refuses the task; None: the host
    image: str | None = None
    #: the job's ``spec.setup`` commands, run once per node before its tasks (backends/setup.py)
    setup: tuple[str, ...] = ()


class TaskState(StrEnum):
    UNKNOWN = "Unknown"  # never started here (or its record is gone)
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    LOST = "Lost"  # it was started but died without an exit code (killed, machine gone)
    #: the backend could not be asked: nothing is known (never a reason to give a task up)
    UNREACHABLE = "Unreachable"


@dataclass(frozen=True)
class TaskStatus:
    request_id: str
    state: TaskState
    exit_code: int | None = None
    message: str = ""
    #: when the task really started and ended, where the backend knows better than the
    #: controller's observation (a backend with a queue of its own: Slurm's accounting); None:
    #: the controller takes the time it saw the change (the usage ledger charges these times)
    started_at: datetime | None = None
    finished_at: datetime | None = None


class Backend(Protocol):
    """One place tasks run. Methods are called from the controller's thread only."""

    name: str

    def inventory(self) -> Inventory:
        """The nodes this backend offers now."""
        ...

    def start(self, request: LaunchRequest) -> None:
        """Start a task; a second call with the same ``request_id`` does nothing."""
        ...

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        """Ask a task to end (SIGTERM, then SIGKILL after ``grace_seconds``)."""
        ...

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        """What is true now for each id (UNKNOWN for ids never started here)."""
        ...

    def close(self) -> None:
        """Release what the backend holds in this process; running tasks keep running."""
        ...


class MembershipFiles(Protocol):
    """An optional capability: a file each task of an elastic job can read, naming the job's
    current members (JSON: ``size``, ``members`` with ``rank``, ``name`` and ``node``), kept
    up to date by the controller. Written by the backend because only it knows where its tasks
    may read (the local backend's task users cannot enter the server's directories)."""

    def membership_file(self, node: str, tenant: str, job: str) -> str | None:
        """The path a task of ``job`` (a job's unique directory name) on ``node`` reads; None
        when this backend has no such file for that node."""
        ...

    def update_membership(self, tenant: str, job: str, payload: Mapping[str, object]) -> None:
        """Write the membership (atomically: a reader sees the old or the new one)."""
        ...


def membership_files(backend: object) -> MembershipFiles | None:
    """The backend, when it keeps membership files."""
    if hasattr(backend, "membership_file") and hasattr(backend, "update_membership"):
        return cast(MembershipFiles, backend)
    return None
