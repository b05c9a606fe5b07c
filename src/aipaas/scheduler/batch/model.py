"""The snapshot a batch-scheduling session reads and the decisions it returns: pure data.

Units everywhere: GPU in milli-GPUs (1000 = one whole GPU), CPU in millicores, memory and GPU
memory in MiB, times in seconds on the caller's clock (virtual in simulation, epoch seconds in
the live controller).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aipaas.api.resource_vector import NO_LIMIT as NO_LIMIT
from aipaas.api.resource_vector import RESOURCE_NAMES as RESOURCE_NAMES
from aipaas.api.resource_vector import UNBOUNDED as UNBOUNDED
from aipaas.api.resource_vector import Resources as Resources
from aipaas.scheduler.framework.types import Placement, PodRequest, Taint


@dataclass(frozen=True, slots=True)
class QueueNode:
    """One level of the queue tree: the cluster root (key ""), a tenant (key "t"), or a queue
    (key "t/q", parent "t" or "t/<parent queue>"). Jobs are only in leaves."""

    key: str
    parent: str | None  # None for the root only
    tenant: str  # "" for the root
    guaranteed: Resources = Resources()
    quota: Resources = NO_LIMIT
    weight: float = 1.0
    priority: int = 0
    #: creation order among all queues: ties of fair share go to the child created first
    created: int = 0
    #: seconds a job of this queue runs before it may be preempted or reclaimed
    min_runtime: float = 0.0
    #: how many backfill reservations the queue's jobs may hold at once
    reservations: int = 1
    #: usage over time counts (decayed usage with this half-life, seconds); None: it does not
    usage_half_life: float | None = None
    #: past usage (resource-seconds, already decayed to ``now`` by the caller), for fair share
    #: over time: only read when ``usage_half_life`` is set
    decayed_usage: Resources = Resources()
    #: why admission to this node (and every queue below it) is stopped, in words (a budget's
    #: stopAdmission); "": it is not. Jobs below a held node start nothing; what runs goes on.
    hold: str = ""


@dataclass(slots=True)
class Task:
    """One replica of a job. Running tasks carry their ``placement`` (held in the cluster)."""

    name: str  # "<task name>-<index>"
    request: PodRequest
    placement: Placement | None = None
    since: float | None = None  # when it started (running tasks)
    gpu_memory_mib: int = 0
    #: what the task counts against quotas and shares when its request does not say it all
    #: (the live controller: GPUs a DRA claim is given are not in the request's count)
    counted: Resources | None = None
    #: what backfill reservations fit for a task whose request has DRA claims (their fit sees
    #: GPUs by count, not devices): the same task asking for whole GPUs by count, when its
    #: claims amount to that (the live controller's compiled ``gpu:`` short form); None: the
    #: request itself, and a gang with claims and no ``fit`` gets no reservation
    fit: PodRequest | None = None
    #: the GPUs (indices on its node) that a running task's claims hold whole, which its
    #: placement does not list (the device ledger holds them): what it gives back as
    #: reservations see it when it ends
    device_gpus: tuple[int, ...] = ()
    #: a pending task whose DRA claims' whole GPUs count against quotas once it is placed
    #: (how many depends on the devices chosen: ``PlacementEngine.claimed_gpus``); the
    #: Statement adds them to ``counted`` when it places the task
    counts_claimed_gpus: bool = False
    #: ``resources`` worked out once (the request does not change; backlogs ask often)
    _resources: Resources | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def running(self) -> bool:
        return self.placement is not None

    @property
    def resources(self) -> Resources:
        if self.counted is not None:
            return self.counted
        found = self._resources
        if found is None:
            found = self._resources = Resources.of_pod(self.request, self.gpu_memory_mib)
        return found


@dataclass(slots=True)
class Job:
    """A job as the session sees it. ``key`` is "tenant/name"; ``queue`` the leaf's key."""

    key: str
    tenant: str
    queue: str
    tasks: list[Task]
    priority: int = 0
    preemptible: bool = True
    min_available: int = 1
    submitted: float = 0.0
    #: the job's own submission order (ties of everything else)
    order: int = 0
    time_limit: float | None = None
    topology_required: str | None = None  # a node label key naming the level
    topology_preferred: str | None = None
    #: when the current run started (its first task of this run); None while pending
    started: float | None = None
    #: expected end of the current run, when known (time limit): for backfill
    ends_at: float | None = None
    #: "tenant/user" of the submitter whose quota (``Snapshot.users``) the job counts against;
    #: "" when that user has no quota
    user: str = ""
    #: while none of its tasks runs: (min_available, its gang and what the gang asks for, the
    #: gang's request shapes or None with claims: ``session.gang_shape``, the key of
    #: enqueue's verdicts: ``session.verdict_shape``, and ``session.gang_kind``), worked out once
    #: (``session.gang_entry``: a backlog is asked for it every cycle, and the simulator
    #: keeps its jobs across cycles)
    _idle_gang: (
        tuple[
            int,
            tuple[list[Task], Resources],
            tuple[object, ...] | None,
            tuple[object, ...],
            object | None,
        ]
        | None
    ) = field(default=None, init=False, repr=False, compare=False)
    #: what all its tasks ask for together, as ints (``session.job_total``; requests do not
    #: change)
    _total: tuple[int, int, int, int] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def running_tasks(self) -> list[Task]:
        return [t for t in self.tasks if t.running]

    @property
    def pending_tasks(self) -> list[Task]:
        return [t for t in self.tasks if not t.running]

    @property
    def is_running(self) -> bool:
        for task in self.tasks:  # noqa: SIM110 (a plain loop: asked millions of times per run)
            if task.placement is not None:
                return True
        return False

    @property
    def elastic(self) -> bool:
        return self.min_available < len(self.tasks)

    def allocated(self) -> Resources:
        total = Resources()
        for task in self.tasks:
            if task.running:
                total = total + task.resources
        return total

    def gang_request(self) -> Resources:
        """What its first ``min_available`` tasks need (the gang that must start together)."""
        total = Resources()
        for task in self.tasks[: self.min_available]:
            total = total + task.resources
        return total


@dataclass(frozen=True, slots=True)
class Node:
    """A node of the snapshot (capacity and labels); free capacity lives in the cluster."""

    name: str
    gpu_count: int
    cpu_milli: int
    memory_mib: int
    gpu_model: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    #: per GPU: memory (MiB), UUIDs by index, unhealthy indices, most shares (see NodeSpec)
    gpu_memory_mib: int = 0
    gpu_uuids: tuple[str, ...] = ()
    unhealthy_gpus: tuple[int, ...] = ()
    gpu_split: int = 10


@dataclass(slots=True)
class Snapshot:
    """Everything one cycle decides from. ``queues`` holds the whole tree: root, tenants and
    queues; ``jobs`` pending and running (finished ones are not in it)."""

    now: float
    nodes: list[Node]
    queues: dict[str, QueueNode]
    jobs: list[Job]
    #: per-user quotas inside tenants: "tenant/user" -> quota (Job.user names the key)
    users: dict[str, Resources] = field(default_factory=dict)


# --- decisions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    job: str
    task: str
    placement: Placement


@dataclass(frozen=True, slots=True)
class Eviction:
    job: str
    task: str
    #: the job whose start needed the room ("tenant/name")
    by: str
    #: "Preempted" (same queue, higher priority), "Reclaimed" (another queue below its fair
    #: share), "ElasticShrink" (an elastic task above minAvailable)
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Reservation:
    """Backfill: the earliest time the job can start and the nodes held for it."""

    job: str
    start: float
    nodes: tuple[str, ...]


@dataclass(slots=True)
class QueueReport:
    """Per queue (and tenant and root): the numbers ``describe queue`` and the outputs show."""

    guaranteed: Resources
    quota: Resources
    fair_share: Resources
    allocated: Resources
    pending: Resources
    #: allocated above the fair share (capacity the queue holds that others may reclaim)
    borrowed: Resources


@dataclass(slots=True)
class Decisions:
    """What one cycle decided: starts, evictions, reservations, why each waiting job waits
    (``reasons``: (reason code, message in words and numbers)), and the queue numbers."""

    started: list[Start] = field(default_factory=list)
    evicted: list[Eviction] = field(default_factory=list)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    reasons: dict[str, tuple[str, str]] = field(default_factory=dict)
    queues: dict[str, QueueReport] = field(default_factory=dict)
    #: jobs whose starts use room that tasks evicted in this cycle still hold: a platform
    #: carries them out once the victims' stops are confirmed (the simulator at once)
    pipelined: set[str] = field(default_factory=set)
    #: the earliest later time at which a running task's toleration of a NoExecute taint runs
    #: out (tolerationSeconds): a session must run then even if nothing else changed
    due: float | None = None
