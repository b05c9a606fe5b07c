"""API objects -> the batch session's model: the queue tree, pod requests and jobs.

Both callers of the session use these: the live controller (from stored objects) and
``aipaas simulate`` (from a scenario's manifests), so the same manifest means the same tree,
the same admission inputs (budgets' holds on tenants and queues, users' quotas) and the same
job. What differs between the two is only where running tasks come from (task records and the
device ledger; the scenario's ``running``).

Creation order (``QueueNode.created``, what fair-share ties go by): tenants, then queues, each
ordered by ``metadata.creationTimestamp`` and, for equal or missing timestamps, by their order
in the lists given. An object without a timestamp (a scenario's, not stored yet) counts as
newer than every stamped one. Only the order among siblings matters.

Units: GPU in milli-GPUs, CPU in millicores, memory and GPU memory in MiB (model.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Final, TypeVar

from aipaas.api.duration import seconds
from aipaas.api.finops import ADMISSION_STOPPED, effective_queue_spec
from aipaas.api.job import Job as ApiJob
from aipaas.api.job import (
    JobSpec,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    TaskSpec,
    topology_label,
)
from aipaas.api.meta import Object
from aipaas.api.queue import Queue, QueueSpec
from aipaas.api.resources import GpuRequest, Quota, memory_mib
from aipaas.api.tenancy import Tenant, User
from aipaas.scheduler.batch.model import (
    UNBOUNDED,
    Job,
    Node,
    QueueNode,
    Resources,
    Snapshot,
    Task,
)
from aipaas.scheduler.framework.types import (
    GpuShare,
    NodeConstraints,
    Placement,
    PodRequest,
    Requirement,
    Term,
    Toleration,
)

ROOT: Final = ""
#: who submitted a job, as the server writes it (metering/usage.py SUBMITTER_ANNOTATION, which
#: the scheduler may not import; a test holds the two equal)
SUBMITTER_ANNOTATION: Final = "aipaas.dev/submitted-by"
_NOTHING_RUNNING: Final[Mapping[str, tuple[Placement, float]]] = MappingProxyType({})
_NO_USAGE: Final[Mapping[str, Resources]] = MappingProxyType({})
_O = TypeVar("_O", bound=Object)


def resources_of(amounts: Quota, missing: int) -> Resources:
    """A quota-like object in model units; ``missing`` stands for each entry left unset
    (UNBOUNDED for a quota, 0 for a guarantee)."""

    def value(amount: int | None) -> int:
        return missing if amount is None else amount

    return Resources(
        value(amounts.gpu_milli()),
        value(amounts.cpu_milli()),
        value(amounts.memory_mib()),
        value(amounts.gpu_memory_mib()),
    )


def session_snapshot(
    now: float,
    nodes: list[Node],
    tenants: Iterable[Tenant],
    queues: Iterable[Queue],
    users: Iterable[User],
) -> Snapshot:
    """What every session's snapshot starts from, for the live controller and ``aipaas
    simulate`` alike: the nodes, the queue tree (quotas, guarantees, weights, minRuntime,
    budgets' holds) and users' quotas; the caller adds the jobs (``session_job``, with the
    running tasks it knows and ``job_user``). With these the session's decisions are final:
    nothing is checked after it."""
    return Snapshot(
        now=now, nodes=nodes, queues=queue_tree(tenants, queues), jobs=[], users=user_quotas(users)
    )


def queue_tree(
    tenants: Iterable[Tenant],
    queues: Iterable[Queue],
    *,
    usage: Mapping[str, Resources] = _NO_USAGE,
) -> dict[str, QueueNode]:
    """The whole tree by key: root "", each tenant "t", each queue "t/q".

    ``usage`` gives past usage by key (already decayed to now) for fair share over time. A queue
    whose parent does not exist, or that is on a cycle of parents (the server refuses both), is
    put directly under its tenant; a queue of a tenant not given gets a tenant of defaults:
    the scheduler never fails on what the store holds."""
    tenant_list = _by_creation(tenants)
    queue_list = _by_creation(queues)
    tree: dict[str, QueueNode] = {ROOT: QueueNode(key=ROOT, parent=None, tenant="")}
    created = 1
    for tenant in tenant_list:
        if tenant.name in tree:
            continue
        spec = tenant.spec
        half_life = spec.fair_sharing.usage_half_life if spec.fair_sharing else None
        tree[tenant.name] = QueueNode(
            key=tenant.name,
            parent=ROOT,
            tenant=tenant.name,
            guaranteed=resources_of(spec.guaranteed, 0),
            quota=resources_of(spec.quota, UNBOUNDED),
            weight=spec.weight,
            priority=spec.priority,
            created=created,
            usage_half_life=None if half_life is None else float(seconds(half_life)),
            decayed_usage=usage.get(tenant.name, Resources()),
            hold=_hold(tenant, f"tenant {tenant.name}"),
        )
        created += 1
    for queue in queue_list:
        if queue.tenant not in tree:
            tree[queue.tenant] = QueueNode(
                key=queue.tenant, parent=ROOT, tenant=queue.tenant, created=created
            )
            created += 1
    specs: dict[tuple[str, str], QueueSpec] = {}
    for queue in queue_list:
        specs.setdefault((queue.tenant, queue.name), queue.spec)
    for queue in queue_list:
        key = f"{queue.tenant}/{queue.name}"
        if key in tree:
            continue
        parent = queue.tenant
        if _parent_reachable(queue.tenant, queue.name, specs):
            parent = f"{queue.tenant}/{queue.spec.parent}"
        queue_spec = effective_queue_spec(queue)  # a budget's lowerPriority
        tree[key] = _queue_node(key, parent, queue.tenant, queue_spec, created, usage)
        hold = _hold(queue, f"queue {queue.name}")
        if hold:
            tree[key] = replace(tree[key], hold=hold)
        if queue_spec.min_runtime is None:
            inherited = _inherited_min_runtime(queue.tenant, queue.name, specs)
            if inherited:
                tree[key] = replace(tree[key], min_runtime=inherited)
        created += 1
    return tree


def _hold(obj: Tenant | Queue, what: str) -> str:
    """Why a budget stopped admission to ``obj`` (annotation ``aipaas.dev/admission-stopped``
    naming the budgets, written by controller/budget_marks.py), in words; "" when it did not."""
    budgets = obj.metadata.annotations.get(ADMISSION_STOPPED)
    return f"{what}: admission stopped by budget {budgets}" if budgets else ""


def user_quotas(users: Iterable[User]) -> dict[str, Resources]:
    """Per-user quotas inside tenants by "tenant/user" (``Snapshot.users``): the users whose
    ``spec.quota`` is set."""
    return {
        f"{u.tenant}/{u.name}": resources_of(u.spec.quota, UNBOUNDED)
        for u in users
        if u.spec.quota is not None
    }


def job_user(job: ApiJob, users: Mapping[str, Resources]) -> str:
    """The "tenant/user" whose quota ``job`` counts against (its submitter), or "" when that
    user has none."""
    if not users:
        return ""
    key = f"{job.tenant}/{job.metadata.annotations.get(SUBMITTER_ANNOTATION, '')}"
    return key if key in users else ""


def _inherited_min_runtime(
    tenant: str, name: str, specs: Mapping[tuple[str, str], QueueSpec]
) -> float:
    """The minRuntime of the nearest ancestor queue that sets one (0: none does). A parent
    has no jobs of its own: a minRuntime written there is its sub-queues' (KAI-Scheduler's
    resolver walks from the leaf up the same way)."""
    current = name
    while _parent_reachable(tenant, current, specs):
        parent = specs[(tenant, current)].parent
        assert parent is not None  # reachable: named and existing
        found = specs[(tenant, parent)].min_runtime
        if found is not None:
            return float(seconds(found))
        current = parent
    return 0.0


def _queue_node(
    key: str,
    parent: str,
    tenant: str,
    spec: QueueSpec,
    created: int,
    usage: Mapping[str, Resources],
) -> QueueNode:
    half_life = spec.fair_sharing.usage_half_life if spec.fair_sharing else None
    return QueueNode(
        key=key,
        parent=parent,
        tenant=tenant,
        guaranteed=resources_of(spec.guaranteed, 0),
        quota=resources_of(spec.quota, UNBOUNDED),
        weight=spec.weight,
        priority=spec.priority,
        created=created,
        min_runtime=0.0 if spec.min_runtime is None else float(seconds(spec.min_runtime)),
        reservations=spec.reservations,
        usage_half_life=None if half_life is None else float(seconds(half_life)),
        decayed_usage=usage.get(key, Resources()),
    )


def _parent_reachable(tenant: str, name: str, specs: Mapping[tuple[str, str], QueueSpec]) -> bool:
    """The queue names a parent that exists, and it is not on a cycle of parents."""
    parent = specs[(tenant, name)].parent
    if parent is None or (tenant, parent) not in specs:
        return False
    seen: set[str] = set()
    current: str | None = parent
    while current is not None and (tenant, current) in specs:
        if current == name:
            return False  # on a cycle: its members go under the tenant
        if current in seen:
            return True  # a cycle above, not through this queue (its members go under the tenant)
        seen.add(current)
        current = specs[(tenant, current)].parent
    return True


def _by_creation(objects: Iterable[_O]) -> list[_O]:
    def key(item: tuple[int, _O]) -> tuple[bool, datetime, int]:
        index, obj = item
        stamp = _timestamp(obj.metadata.creation_timestamp)
        return (stamp is None, stamp or datetime.min, index)

    return [obj for _, obj in sorted(enumerate(objects), key=key)]


def _timestamp(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        return None
    # Naive and aware stamps cannot be compared: every stamp is read as UTC, naive.
    return stamp.astimezone(UTC).replace(tzinfo=None) if stamp.tzinfo else stamp


# --- jobs --------------------------------------------------------------------------------


def node_constraints(spec: JobSpec) -> NodeConstraints | None:
    """The job's nodeSelector, node affinity and tolerations as the scheduler reads them (the
    live controller and ``aipaas simulate`` both ask this), or None when it has none."""
    affinity = spec.affinity.node_affinity if spec.affinity is not None else None
    required = affinity.required_during_scheduling_ignored_during_execution if affinity else None
    preferred = affinity.preferred_during_scheduling_ignored_during_execution if affinity else []
    if not (spec.node_selector or spec.tolerations or required or preferred):
        return None
    return NodeConstraints(
        selector=tuple(sorted(spec.node_selector.items())),
        required=tuple(_term(t) for t in required.node_selector_terms) if required else (),
        preferred=tuple((p.weight, _term(p.preference)) for p in preferred),
        tolerations=tuple(
            Toleration(t.key or "", t.operator, t.value or "", t.effect or "", t.toleration_seconds)
            for t in spec.tolerations or ()
        ),
    )


def _term(term: NodeSelectorTerm) -> Term:
    def rules(items: list[NodeSelectorRequirement]) -> tuple[Requirement, ...]:
        return tuple((r.key, r.operator, tuple(r.values)) for r in items)

    return (rules(term.match_expressions), rules(term.match_fields))


def pod_request(
    task: TaskSpec, name: str, constraints: NodeConstraints | None = None
) -> PodRequest:
    """What one replica of ``task`` asks of a node, as the controller asks it
    (controller/placement.py ``_request``): whole GPUs or a fraction of one, of a model when
    it names one, on the nodes ``constraints`` admit. DRA claims are the live controller's to
    add (the device allocator)."""
    amounts = task.resources.amounts()
    gpu = task.resources.gpu
    count = amounts.gpu_count
    return PodRequest(
        name=name,
        cpu_milli=amounts.cpu_milli,
        memory_mib=amounts.memory_mib,
        gpu_count=count,
        gpu_milli=amounts.gpu_milli if count else 0,
        gpu_models=(gpu.model,) if gpu is not None and gpu.model and count else (),
        constraints=constraints,
        share=gpu_share(gpu),
    )


def gpu_share(gpu: GpuRequest | None) -> GpuShare | None:
    """The share of each GPU a task asks for by memory and cores (HAMi's form), or None; the
    live controller and ``aipaas simulate`` both ask this."""
    if gpu is None or not gpu.is_share or not gpu.count:
        return None
    return GpuShare(
        memory_mib=memory_mib(gpu.memory) if gpu.memory is not None else 0,
        memory_percent=gpu.memory_percent or 0,
        uuids=tuple(gpu.uuids or ()),
        indices=tuple(gpu.indices or ()),
    )


def gpu_memory_mib(task: TaskSpec) -> int:
    """The GPU memory one replica asks for in all (``gpu.memory`` is per GPU), MiB."""
    gpu = task.resources.gpu
    if gpu is None or gpu.memory is None or not gpu.count:
        return 0
    return memory_mib(gpu.memory) * gpu.count


def batch_job(
    job: ApiJob,
    *,
    key_order: int,
    submitted: float,
    running: Mapping[str, tuple[Placement, float]] = _NOTHING_RUNNING,
    user: str = "",
) -> Job:
    """The session's view of ``job``: tasks "<task>-<i>" in task order, running ones with their
    (placement, since) from ``running`` (by task name). ``preemptible`` unset (a job stored
    before the server resolved it) reads as the classes' default, True."""
    spec = job.spec
    constraints = node_constraints(spec)
    tasks: list[Task] = []
    for task_spec in spec.tasks:
        memory = gpu_memory_mib(task_spec)
        for index in range(task_spec.replicas):
            name = f"{task_spec.name}-{index}"
            held = running.get(name)
            tasks.append(
                Task(
                    name=name,
                    request=pod_request(task_spec, f"{job.tenant}/{job.name}/{name}", constraints),
                    placement=held[0] if held else None,
                    since=held[1] if held else None,
                    gpu_memory_mib=memory,
                )
            )
    return session_job(
        job,
        key=f"{job.tenant}/{job.name}",
        queue=f"{job.tenant}/{spec.queue}",
        tasks=tasks,
        order=key_order,
        submitted=submitted,
        user=user,
    )


def session_job(
    job: ApiJob,
    *,
    key: str,
    queue: str,
    tasks: list[Task],
    order: int,
    submitted: float,
    user: str = "",
) -> Job:
    """The session's job of ``job`` with the tasks its caller made (the live controller from
    task records, ``batch_job`` from the spec): priority, preemptibility, gang, time limit,
    topology, the current run's start (its earliest running task) and the user whose quota it
    counts against. ``preemptible`` unset reads as the classes' default, True."""
    spec = job.spec
    starts = [t.since for t in tasks if t.placement is not None and t.since is not None]
    started = min(starts) if starts else None
    limit = spec.time_limit_seconds
    topology = spec.topology
    return Job(
        key=key,
        tenant=job.tenant,
        queue=queue,
        tasks=tasks,
        priority=spec.priority,
        preemptible=True if spec.preemptible is None else spec.preemptible,
        min_available=spec.gang_size,
        submitted=submitted,
        order=order,
        time_limit=None if limit is None else float(limit),
        topology_required=_label(topology.required if topology else None),
        topology_preferred=_label(topology.preferred if topology else None),
        started=started,
        ends_at=None if started is None or limit is None else started + limit,
        user=user,
    )


def _label(level: str | None) -> str | None:
    return None if level is None else topology_label(level)
