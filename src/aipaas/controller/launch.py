"""What a task is started with: the environment a distributed job expects, its log file.

Who calls it: the controller's cycle, for each attempt it starts (``make_request``). Every
backend gets the same variables from here: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
NODE_RANK, MASTER_ADDR, MASTER_PORT and AIPAAS_* (an elastic job also its rendezvous endpoint,
backends/rendezvous.py); ``$(VAR)`` in the command is expanded with
them and the job's env as Kubernetes does (``expand``). Pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aipaas.api.job import SIM_DURATION_ANNOTATION, Job, TaskPhase, TaskSpec
from aipaas.backends import rendezvous
from aipaas.backends.base import MASTER_PORTS, ClaimDevice, LaunchRequest
from aipaas.backends.expansion import expand
from aipaas.backends.gang import GANG_ANNOTATION, Gang, GangMember
from aipaas.store import TaskRecord

ACTIVE_PHASES = (TaskPhase.STARTING.value, TaskPhase.RUNNING.value)


def request_id(record: TaskRecord) -> str:
    """Unique per attempt and stable: asking twice with it never starts a task twice."""
    return f"{record.job_uid}.{record.name}.{record.attempt}"


def log_path(log_dir: Path, job: Job, task_name: str) -> str:
    return str(
        log_dir / job.tenant / f"{job.name}-{(job.metadata.uid or '')[:8]}" / f"{task_name}.log"
    )


#: backends that expand ``$(VAR)`` in a command themselves, once they have put in the values the
#: task really gets (a node's address in MASTER_ADDR: backends/expansion.py), or whose engine
#: does (the pod's kubelet)
EXPANDS_ITSELF = frozenset({"kubernetes", "slurm", "ray"})


def master_port(job_uid: str) -> int:
    """A port for rank 0's rendezvous, spread by job so concurrent jobs rarely collide (a
    backend that can see the node's ports moves it to a free one: backends/local)."""
    digest = int(hashlib.sha256(job_uid.encode()).hexdigest()[:8], 16)
    return MASTER_PORTS.start + digest % len(MASTER_PORTS)


def wants_simulated(job: Job) -> bool:
    """The job asks for simulated nodes (it declares a simulated duration): only such a job
    goes to nodes that take work on request (the demo backend's simulated cluster)."""
    return SIM_DURATION_ANNOTATION in job.metadata.annotations


def task_spec(job: Job, group: str) -> TaskSpec:
    for task in job.spec.tasks:
        if task.name == group:
            return task
    raise KeyError(f"job {job.name} has no task {group}")


def make_request(
    job: Job,
    record: TaskRecord,
    records: Sequence[TaskRecord],
    node_backends: Mapping[str, str],
    devices: tuple[ClaimDevice, ...] = (),
    *,
    fencing_token: int | None = None,
    membership_file: str | None = None,
    claims: tuple[Mapping[str, Any], ...] = (),
    gang: bool = False,
) -> LaunchRequest:
    """The request that starts ``record``'s attempt. WORLD_SIZE is the job's size: all its
    replicas, or for an elastic job (minAvailable below the replicas) the tasks starting or
    running now, this one included; an elastic job's tasks also get AIPAAS_MEMBERSHIP_FILE
    (controller/membership.py) when the backend keeps one, and torchrun's rendezvous
    variables (backends/rendezvous.py). ``gang``: the backend reserves a
    gang at once (backends/gang.py): the tasks starting with this one go in its annotations."""
    spec = task_spec(job, record.group_name)
    elastic = job.spec.min_available is not None and job.spec.min_available < len(records)
    size = (
        sum(1 for r in records if r.phase in ACTIVE_PHASES and not r.stopping)
        if elastic
        else len(records)
    )
    master = next((r for r in records if r.rank == 0), record)
    master_node = master.node or record.node or ""
    master_addr = "127.0.0.1" if node_backends.get(master_node) == "local" else master_node
    same_node = sorted(r.rank for r in records if r.node == record.node)
    # Nodes in the order of their lowest rank: rank 0's node is node 0 (torchrun's node_rank).
    nodes: list[str] = []
    for other in sorted(records, key=lambda r: r.rank):
        if other.node and other.node not in nodes:
            nodes.append(other.node)
    env = dict(spec.env)
    env.update(
        {
            "RANK": str(record.rank),
            "WORLD_SIZE": str(max(size, 1)),
            "LOCAL_RANK": str(same_node.index(record.rank) if record.rank in same_node else 0),
            "LOCAL_WORLD_SIZE": str(len(same_node)),
            "NODE_RANK": str(nodes.index(record.node) if record.node in nodes else 0),
            # how many nodes the job's placed tasks are on (Slurm's SLURM_NNODES)
            "AIPAAS_NODES": str(max(len(nodes), 1)),
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(master_port(job.metadata.uid or job.name)),
            "AIPAAS_JOB": job.name,
            "AIPAAS_TENANT": job.tenant,
            "AIPAAS_TASK": record.name,
            "AIPAAS_TASK_INDEX": str(record.index),
            "AIPAAS_ATTEMPT": str(record.attempt),
        }
    )
    if membership_file is not None:
        env["AIPAAS_MEMBERSHIP_FILE"] = membership_file
    if elastic:  # torchrun's c10d rendezvous (backends/rendezvous.py); the job's env wins
        low, port = job.spec.min_available or 1, int(env["MASTER_PORT"])
        host = record.rank == 0
        found = rendezvous.variables(
            master_addr, port, record.job_uid, low, len(records), host=host
        )
        env.update({k: v for k, v in found.items() if k not in spec.env})
        if "PET_RDZV_CONF" in spec.env:  # the job's options, and who hosts the store
            env["PET_RDZV_CONF"] = rendezvous.with_conf(spec.env["PET_RDZV_CONF"], host)
    limits = spec.limits.amounts() if spec.limits is not None else (0, 0)
    # Kubernetes expands $(VAR) in a pod's command itself, by the same rules: expanded twice,
    # a $$(VAR) written to keep $(VAR) would be expanded after all.
    native = node_backends.get(record.node or "") in EXPANDS_ITSELF
    command = tuple(spec.command) if native else tuple(expand(p, env) for p in spec.command)
    duration = job.metadata.annotations.get(SIM_DURATION_ANNOTATION)
    annotations = dict(job.metadata.annotations)
    if gang:
        annotations[GANG_ANNOTATION] = starting_with(job, record, records).encode()
    return LaunchRequest(
        request_id=record.request_id or request_id(record),
        task=record.name,
        job=job.name,
        tenant=job.tenant,
        node=record.node or "",
        command=command,
        env=env,
        working_dir=spec.working_dir,
        gpus=record.gpus,
        gpu_milli=record.gpu_milli,
        log_path=record.log_path or "",
        duration_seconds=_seconds(duration),
        annotations=annotations,
        devices=devices,
        fencing_token=fencing_token,
        simulated=wants_simulated(job),
        cpu_milli=spec.resources.amounts().cpu_milli,
        memory_mib=spec.resources.amounts().memory_mib,
        claims=claims,
        labels=dict(job.metadata.labels),
        grace_seconds=float(job.spec.grace_seconds),
        work_key=f"{record.job_uid}.{record.name}",
        job_uid=record.job_uid,
        workdir_archive=job.spec.workdir,
        limit_cpu_milli=limits[0],
        limit_memory_mib=limits[1],
        image=spec.image,
        setup=tuple(job.spec.setup or ()),
    )


def starting_with(job: Job, record: TaskRecord, records: Sequence[TaskRecord]) -> Gang:
    """The job's tasks that start in the same round as ``record``: Starting, same attempt."""
    together = [record] + [
        r
        for r in records
        if r.name != record.name
        and r.phase == TaskPhase.STARTING.value
        and r.attempt == record.attempt
        and not r.stopping
        and r.node
    ]
    members = tuple(
        GangMember(
            rank=r.rank,
            task=r.name,
            node=r.node or "",
            gpus=len(r.gpus),
            gpu_milli=r.gpu_milli,
            cpu_milli=task_spec(job, r.group_name).resources.amounts().cpu_milli,
        )
        for r in sorted(together, key=lambda r: r.rank)
    )
    return Gang(f"{record.job_uid}.{record.attempt}", members, record.job_uid)


def _seconds(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.rstrip("s"))
    except ValueError:
        return None
    return value if value >= 0 else None
