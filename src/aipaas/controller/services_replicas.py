"""A service's replicas as jobs: making one, asking one to stop, choosing its port.

A replica is a Job of one task, labelled with its service and revision, in the service's
queue at the service's priority (not preemptible unless the service says): the batch
scheduler places it like any job, and quotas, fair share and preemption count it. The task
gets its port in ``$PORT``. A stopped replica is cancelled and deleted (the controller removes
a job asked to be deleted once it has stopped; its usage stays in the ledger).
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Iterable, Mapping
from datetime import datetime

from aipaas.api.job import CANCEL_ANNOTATION, Job, JobSpec, JobStatus, TaskSpec
from aipaas.api.meta import ObjectMeta
from aipaas.api.priority import DEFAULT_CLASS, PriorityClass, resolve_priority
from aipaas.api.service import (
    EVICTION_DRAIN_ANNOTATION,
    PORT_ANNOTATION,
    REVISION_LABEL,
    SERVICE_LABEL,
    ReplicaRecord,
    Service,
    ServiceStatus,
)
from aipaas.api.tenancy import Tenant
from aipaas.clock import isoformat
from aipaas.controller.write_back import DELETE_ANNOTATION
from aipaas.errors import AlreadyExists, Conflict, NotFound
from aipaas.metering.usage import SUBMITTER_ANNOTATION
from aipaas.store import Connection, Store

PORTS = range(30000, 32768)
TASK_NAME = "server"


def choose_port(taken: set[int], rng: random.Random) -> int:
    """A port no other replica the controller knows of uses (a process outside aipaas that
    holds it makes the replica fail, and a new one gets another port)."""
    for _ in range(64):
        port = rng.choice(PORTS)
        if port not in taken:
            return port
    return next(p for p in PORTS if p not in taken)


def replica_name(service: str) -> str:
    """``<service>-<6 random characters>``, shortened to fit a name's 63 characters."""
    suffix = secrets.token_hex(3)
    return f"{service[: 63 - len(suffix) - 1].rstrip('-')}-{suffix}"


def replica_job(
    service: Service,
    name: str,
    port: int,
    *,
    classes: Mapping[str, PriorityClass],
    tenant: Tenant | None,
) -> Job:
    spec = service.spec
    template = spec.template
    default_class = tenant.spec.default_priority_class if tenant is not None else DEFAULT_CLASS
    job_spec = JobSpec(
        queue=spec.queue,
        priority_class_name=spec.priority_class_name or default_class,
        preemptible=spec.preemptible,
        node_selector=dict(spec.node_selector),
        tasks=[
            TaskSpec(
                name=TASK_NAME,
                command=list(template.command),
                env={**template.env, "PORT": str(port), "AIPAAS_SERVICE": service.name},
                working_dir=template.working_dir,
                resources=template.resources,
            )
        ],
    )
    priority, preemptible = resolve_priority(job_spec, classes, default_class)
    job_spec = job_spec.model_copy(update={"priority": priority, "preemptible": preemptible})
    annotations = {
        PORT_ANNOTATION: str(port),
        SUBMITTER_ANNOTATION: f"service/{service.name}"[:63],
    }
    if preemptible and spec.on_eviction == "Drain" and spec.drain_seconds > 0:
        annotations[EVICTION_DRAIN_ANNOTATION] = f"{spec.drain_seconds:g}"
    meta = ObjectMeta(
        name=name,
        tenant=service.tenant,
        labels={SERVICE_LABEL: service.name, REVISION_LABEL: spec.revision()},
        annotations=annotations,
    )
    return Job(metadata=meta, spec=job_spec, status=JobStatus(reason="Submitted"))


def create_replica(store: Store, job: Job, conn: Connection) -> Job | None:
    """Store the replica's job (None when its name is taken: the caller tries another)."""
    try:
        created = store.create(job, conn=conn)
    except AlreadyExists:
        return None
    store.record_event(created, "Created", "a replica of its service", conn=conn)
    return created if isinstance(created, Job) else None


def stop_replica(store: Store, tenant: str, name: str, why: str) -> bool:
    """Cancel the replica's job and have it deleted once stopped; False when it is gone."""
    for _ in range(5):
        try:
            current = store.get("Job", tenant, name)
        except NotFound:
            return False
        annotations = dict(current.metadata.annotations)
        if CANCEL_ANNOTATION in annotations and DELETE_ANNOTATION in annotations:
            return True
        now = isoformat(store.clock.now())
        annotations.setdefault(CANCEL_ANNOTATION, now)
        annotations.setdefault(DELETE_ANNOTATION, now)
        meta = current.metadata.model_copy(update={"annotations": annotations})
        try:
            store.update(
                current.model_copy(update={"metadata": meta}),
                expected_version=current.metadata.resource_version,
            )
        except Conflict:
            continue
        except NotFound:
            return False
        store.record_event(current, "ReplicaStopped", why)
        return True
    return True


def node_addresses(nodes: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Node name -> the address its replicas answer on: this machine's loopback for the local
    backend, the node's name (resolved by DNS) for the others."""
    return {name: "127.0.0.1" if backend == "local" else name for name, backend in nodes}


def adopt_replicas(store: Store, service: Service, jobs: list[Job], taken: set[int]) -> Service:
    """Replica jobs of the service that its status does not list (made in a cycle whose
    status write was lost) join its records, so that none runs unseen."""
    status = service.status if service.status is not None else ServiceStatus()
    known = {r.job for r in status.replica_jobs}
    found = [job for job in jobs if job.name not in known]
    if not found:
        return service
    records = list(status.replica_jobs)
    for job in found:
        port = job.metadata.annotations.get(PORT_ANNOTATION, "")
        if not port.isdigit():
            stop_replica(store, job.tenant, job.name, "a replica without a port")
            continue
        created = job.metadata.creation_timestamp or ""
        records.append(
            ReplicaRecord(
                job=job.name,
                revision=job.metadata.labels.get(REVISION_LABEL, ""),
                port=int(port),
                created_at=_epoch(created),
            )
        )
        taken.add(int(port))
    return service.model_copy(
        update={"status": status.model_copy(update={"replica_jobs": records})}
    )


def _epoch(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
