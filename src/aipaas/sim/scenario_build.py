"""A validated Scenario document -> the batch session's model, with what runs held.

The manifests go through the API's own models (registry ``parse_object``) and the same
conversion the live controller uses (batch/from_api.py: the queue tree with budgets' holds,
users' quotas and each job's user, the session's jobs), so a scenario means what the platform
would make of the same objects: a Tenant or Queue annotated ``aipaas.dev/admission-stopped``
starts nothing, a User's ``spec.quota`` bounds the jobs annotated
``aipaas.dev/submitted-by: <user>``. On top of what the API checks one object at a time, the
scenario is checked as the server checks a store: tenants and queues exist, a parent is a
queue of the same tenant and no cycle, jobs only in leaf queues, priorities resolved as the
server does for a platform admin (a class name or a number). Every problem names its field.

Jobs not in ``running`` are pending at ``now``, submitted in the order listed, one second
apart, before ``now`` (jobs in ``arrivals`` are submitted at their time instead, when the
caller honours arrivals: ``simulate run``). A running job is submitted at its ``since``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aipaas.api.job import Job as ApiJob
from aipaas.api.meta import Object
from aipaas.api.priority import DEFAULT_CLASS, PriorityClass, resolve_priority
from aipaas.api.queue import Queue
from aipaas.api.registry import parse_object
from aipaas.api.resources import cpu_milli, memory_mib
from aipaas.api.tenancy import Tenant, User
from aipaas.errors import FieldError, InvalidObject
from aipaas.scheduler.batch.cluster import SnapshotCluster
from aipaas.scheduler.batch.from_api import batch_job, job_user, pod_request, session_snapshot
from aipaas.scheduler.batch.model import Job, Node, QueueNode, Resources
from aipaas.scheduler.batch.options import BatchOptions
from aipaas.scheduler.framework.profile import SchedulerProfile, load_profile
from aipaas.scheduler.framework.types import Taint
from aipaas.sim.scenario import (
    ScenarioDocument,
    parse_document,
    read_scenario_text,
    validate_document,
)
from aipaas.sim.scenario_hold import hold_running

#: the most replicas the workload keeps, as the live controller's (controller/workload.py
#: DEFAULT_SIZE): the last ones listed
WORKLOAD_SIZE = 2000


@dataclass
class Scenario:
    """Everything a cycle or a run starts from. ``engine`` already holds the running tasks
    (their placements are on ``jobs``' tasks)."""

    name: str
    now: float
    profile: SchedulerProfile
    options: BatchOptions
    nodes: list[Node]
    queues: dict[str, QueueNode]
    #: every job of the scenario by key, in the order listed
    jobs: dict[str, Job]
    engine: SnapshotCluster
    #: ``simulate run``: when each job is submitted (jobs listed in ``arrivals``)
    arrivals: dict[str, float] = field(default_factory=dict)
    #: ``simulate run``: how long a started job runs (seconds)
    durations: dict[str, float] = field(default_factory=dict)
    #: jobs whose ``dependsOn`` name other jobs: key -> the keys it waits for
    depends_on: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: per-user quotas by "tenant/user" (``Snapshot.users``)
    users: dict[str, Resources] = field(default_factory=dict)


def build_scenario(
    document: ScenarioDocument, *, honour_arrivals: bool, base: Path | None = None
) -> Scenario:
    """The model of a validated document (InvalidObject naming the field on any problem)."""
    spec = document.spec
    objects = _parse_objects(spec.objects)
    tenants = [o for _, o in objects if isinstance(o, Tenant)]
    queues = [o for _, o in objects if isinstance(o, Queue)]
    classes = {o.name: o for _, o in objects if isinstance(o, PriorityClass)}
    tenants_by_name = {t.name: t for t in tenants}
    api_jobs = [(i, o) for i, o in objects if isinstance(o, ApiJob)]
    _check_tree(objects)
    users_listed = [o for _, o in objects if isinstance(o, User)]
    start = session_snapshot(spec.now, [], tenants, queues, users_listed)
    tree, users = start.queues, start.users
    leaves = {k for k in tree if "/" in k} - {n.parent for n in tree.values() if n.parent}
    running = {r.job: (i, r) for i, r in enumerate(spec.running)}
    _check_references(spec, {f"{j.tenant}/{j.name}" for _, j in api_jobs})
    arrivals = {a.job: a.at for a in spec.arrivals} if honour_arrivals else {}
    queued = [f"{j.tenant}/{j.name}" for _, j in api_jobs]
    queued = [k for k in queued if k not in running and k not in arrivals]
    submitted = {key: spec.now - len(queued) + n for n, key in enumerate(queued)}
    for key, (_, entry) in running.items():
        submitted[key] = entry.since
    submitted.update(arrivals)
    listing = {f"{j.tenant}/{j.name}": n for n, (_, j) in enumerate(api_jobs)}
    order = {k: n for n, k in enumerate(sorted(listing, key=lambda k: (submitted[k], listing[k])))}
    jobs: dict[str, Job] = {}
    depends: dict[str, tuple[str, ...]] = {}
    for index, api_job in api_jobs:
        key = f"{api_job.tenant}/{api_job.name}"
        where = f"spec.objects[{index}]"
        if key in jobs:
            raise _error(f"{where}.metadata.name", f"job {key} is given twice")
        queue = f"{api_job.tenant}/{api_job.spec.queue}"
        if queue not in tree:
            raise _error(f"{where}.spec.queue", f"queue {queue} does not exist")
        if queue not in leaves:
            raise _error(f"{where}.spec.queue", f"queue {queue} has sub-queues: jobs go in leaves")
        _check_claims(api_job, where)
        resolved = _resolve_priority(api_job, classes, tenants_by_name, where)
        job = batch_job(
            resolved,
            key_order=order[key],
            submitted=submitted[key],
            user=job_user(resolved, users),
        )
        jobs[key] = job
        if api_job.spec.depends_on:
            depends[key] = tuple(f"{api_job.tenant}/{n}" for n in api_job.spec.depends_on)
    profile = _profile(spec.profile, base)
    nodes = [
        Node(
            name=n.name,
            gpu_count=n.gpu,
            cpu_milli=cpu_milli(n.cpu),
            memory_mib=memory_mib(n.memory),
            gpu_model=n.gpu_model,
            labels=dict(n.labels),
            taints=tuple(Taint(t.key, t.value, t.effect, t.time_added) for t in n.taints),
            gpu_memory_mib=memory_mib(n.gpu_memory) if n.gpu_memory else 0,
            gpu_uuids=tuple(n.gpu_uuids),
            unhealthy_gpus=tuple(n.unhealthy_gpus),
            gpu_split=n.gpu_split,
        )
        for n in spec.nodes
    ]
    seen: set[str] = set()
    for i, node in enumerate(nodes):
        if node.name in seen:
            raise _error(f"spec.nodes[{i}].name", f"node {node.name} is given twice")
        seen.add(node.name)
    by_key = {f"{j.tenant}/{j.name}": j for _, j in api_jobs}
    workload = [
        pod_request(task, f"{task.name}-{index}")
        for key in spec.workload
        for task in by_key[key].spec.tasks
        for index in range(task.replicas)
    ][-WORKLOAD_SIZE:]
    engine = SnapshotCluster(nodes, profile, workload=workload)
    for key, (i, entry) in running.items():
        hold_running(engine, jobs[key], entry, f"spec.running[{i}]", spec.now)
    durations = {d.job: d.seconds for d in spec.durations}
    return Scenario(
        name=document.metadata.name,
        now=spec.now,
        profile=profile,
        options=profile.spec.batch,
        nodes=nodes,
        queues=tree,
        jobs=jobs,
        engine=engine,
        arrivals=arrivals,
        durations=durations,
        depends_on=depends,
        users=users,
    )


def _error(path: str, reason: str) -> InvalidObject:
    return InvalidObject([FieldError(path, reason)])


def _parse_objects(raw: list[dict[str, Any]]) -> list[tuple[int, Object]]:
    named_classes = {
        o.get("metadata", {}).get("name")
        for o in raw
        if o.get("kind") == "PriorityClass" and isinstance(o.get("metadata"), dict)
    }
    out: list[tuple[int, Object]] = []
    for index, data in enumerate(raw):
        where = f"spec.objects[{index}]"
        try:
            obj = parse_object(_class_named_by_priority(data, named_classes))
        except InvalidObject as err:
            fields = [
                FieldError(f"{where}.{f.path}" if f.path else where, f.reason) for f in err.fields
            ]
            raise InvalidObject(fields) from err
        if not isinstance(obj, Tenant | Queue | PriorityClass | ApiJob | User):
            raise _error(
                f"{where}.kind",
                f"{obj.kind} is not simulated (nodes go in spec.nodes; objects: Tenant, "
                "Queue, PriorityClass, Job, User)",
            )
        if obj.namespaced and not obj.tenant and not isinstance(obj, User):
            raise _error(f"{where}.metadata.tenant", f"a {obj.kind} needs its tenant")
        out.append((index, obj))
    return out


def _class_named_by_priority(data: dict[str, Any], classes: set[Any]) -> dict[str, Any]:
    """``priority: research`` names the PriorityClass research of the scenario (the API reads
    only the built-in names there): the scenario acts as a platform admin."""
    spec = data.get("spec")
    if data.get("kind") != "Job" or not isinstance(spec, dict):
        return data
    value = spec.get("priority")
    if isinstance(value, str) and value in classes and "priorityClassName" not in spec:
        rest = {k: v for k, v in spec.items() if k != "priority"}
        return {**data, "spec": {**rest, "priorityClassName": value}}
    return data


def _check_tree(objects: list[tuple[int, Object]]) -> None:
    """Tenants exist, names are unique, parents are queues of the same tenant, no cycles."""
    tenants: set[str] = set()
    seen: dict[tuple[str, str, str], int] = {}
    parents: dict[tuple[str, str], tuple[int, str | None]] = {}
    for index, obj in objects:
        where = f"spec.objects[{index}]"
        identity = (obj.kind, obj.tenant, obj.name)
        if identity in seen and not isinstance(obj, ApiJob):
            what = f"{obj.tenant}/{obj.name}" if obj.tenant else obj.name
            raise _error(f"{where}.metadata.name", f"{obj.kind} {what} is given twice")
        seen[identity] = index
        if isinstance(obj, Tenant):
            tenants.add(obj.name)
        elif isinstance(obj, Queue):
            parents[(obj.tenant, obj.name)] = (index, obj.spec.parent)
    for index, obj in objects:
        if obj.tenant and obj.tenant not in tenants:
            raise _error(
                f"spec.objects[{index}].metadata.tenant", f"tenant {obj.tenant} does not exist"
            )
    for (tenant, name), (index, parent) in parents.items():
        if parent is None:
            continue
        if (tenant, parent) not in parents:
            raise _error(
                f"spec.objects[{index}].spec.parent",
                f"queue {tenant}/{parent} does not exist (a parent is a queue of the same tenant)",
            )
        current: str | None = parent
        for _ in range(len(parents)):
            if current is None:
                break
            if current == name:
                raise _error(
                    f"spec.objects[{index}].spec.parent",
                    f"queue {tenant}/{name} is its own ancestor (a cycle of parents)",
                )
            current = parents[(tenant, current)][1]


def _check_references(spec: Any, jobs: set[str]) -> None:
    def check(kind: str, keys: list[str]) -> None:
        seen: set[str] = set()
        for i, key in enumerate(keys):
            if key not in jobs:
                raise _error(f"spec.{kind}[{i}].job", f"no job {key} (jobs are tenant/name)")
            if key in seen:
                raise _error(f"spec.{kind}[{i}].job", f"job {key} is listed twice")
            seen.add(key)

    check("running", [r.job for r in spec.running])
    check("arrivals", [a.job for a in spec.arrivals])
    check("durations", [d.job for d in spec.durations])
    check("workload", list(spec.workload))
    running = {r.job for r in spec.running}
    for i, arrival in enumerate(spec.arrivals):
        if arrival.job in running:
            raise _error(f"spec.arrivals[{i}].job", f"job {arrival.job} runs at now already")


def _check_claims(job: ApiJob, where: str) -> None:
    for t, task in enumerate(job.spec.tasks):
        if task.resources.claims:
            raise _error(
                f"{where}.spec.tasks[{t}].resources.claims",
                "DRA claims are not simulated (ask for gpu: count or a fraction)",
            )
        for name in task.resources.extended_asked():  # each compiles to a DRA claim
            raise _error(
                f"{where}.spec.tasks[{t}].resources[{name}]",
                "extended resources are served by DRA claims, which are not simulated",
            )


def _resolve_priority(
    job: ApiJob, classes: dict[str, PriorityClass], tenants: dict[str, Tenant], where: str
) -> ApiJob:
    """As the server resolves it for a platform admin (api/priority.py): a number of its own is
    kept; a class gives its value; ``preemptible`` unset takes the class's; a job naming no
    class has its tenant's default class."""
    tenant = tenants.get(job.tenant)
    default = tenant.spec.default_priority_class if tenant is not None else DEFAULT_CLASS
    try:
        value, preemptible = resolve_priority(job.spec, classes, default)
    except InvalidObject as err:
        fields = [FieldError(f"{where}.{f.path}", f.reason) for f in err.fields]
        raise InvalidObject(fields) from err
    spec = job.spec
    if (
        spec.priority == value
        and spec.preemptible is preemptible
        and {"priority", "preemptible"} <= spec.model_fields_set
    ):
        return job  # already resolved: the copy would be equal (tens of thousands of jobs)
    update = {"priority": value, "preemptible": preemptible}
    return job.model_copy(update={"spec": spec.model_copy(update=update)})


def _profile(name: str, base: Path | None) -> SchedulerProfile:
    candidate = name
    if base is not None and not Path(name).is_absolute() and (base / name).is_file():
        candidate = str(base / name)
    try:
        return load_profile(candidate)
    except ValueError as err:
        raise _error("spec.profile", str(err)) from err


def load_scenario(path: str | Path, *, honour_arrivals: bool) -> Scenario:
    """Read, check and build the scenario file at ``path`` (InvalidObject naming the field)."""
    text = read_scenario_text(path)
    document = validate_document(parse_document(text))
    return build_scenario(document, honour_arrivals=honour_arrivals, base=Path(path).parent)
