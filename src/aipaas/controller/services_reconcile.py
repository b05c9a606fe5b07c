"""One service, one cycle: replicas observed, health checked, count decided, replicas started
and stopped, status written (controller/services.py calls it for each service)."""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from aipaas.api.job import Job, JobPhase, TaskPhase
from aipaas.api.priority import PriorityClass
from aipaas.api.service import (
    Endpoint,
    ReplicaRecord,
    Service,
    ServiceStatus,
)
from aipaas.api.tenancy import Tenant
from aipaas.autoscale.replicas import Load, ScalerMemory, decide
from aipaas.autoscale.service_rollout import ReplicaView, plan
from aipaas.backends.service_endpoints import endpoint_owners
from aipaas.clock import isoformat
from aipaas.controller.extensions import CycleContext
from aipaas.controller.services_probe import LIVE, READY, Prober
from aipaas.controller.services_replicas import (
    choose_port,
    create_replica,
    replica_job,
    replica_name,
    stop_replica,
)
from aipaas.errors import NotFound
from aipaas.store import TaskRecord, TaskRepository

log = logging.getLogger("aipaas.controller")
#: the longest wait before a replica replaces one that ended without being asked to
MAX_BACKOFF_SECONDS = 60.0


@dataclass
class ServiceMemory:
    """What the controller remembers of one service between cycles (lost on restart: the
    scaler starts again from the status's desired count)."""

    scaler: ScalerMemory = field(default_factory=ScalerMemory)
    #: replicas that ended on their own since one was last ready (a crash loop waits longer)
    failures: int = 0
    not_before: float = 0.0


class Reconciler:
    def __init__(
        self,
        context: CycleContext,
        prober: Prober,
        *,
        addresses: Mapping[str, str],
        taken_ports: set[int],
        rng: random.Random,
    ) -> None:
        self.context = context
        self.store = context.store
        self.prober = prober
        self.addresses = addresses
        self.taken = taken_ports
        self.rng = rng
        self.memory = ServiceMemory()  # the service of the moment's (set by reconcile)

    def reconcile(
        self,
        service: Service,
        memory: ServiceMemory,
        load: Load | None,
        wall: datetime,
    ) -> tuple[int, int]:
        """One cycle of the service; its desired and ready replica counts."""
        now = wall.timestamp()
        before = service.status if service.status is not None else ServiceStatus()
        self.memory = memory
        records = self._observe(service, [r.model_copy() for r in before.replica_jobs], now)
        serving = [r for r in records if r.draining_since is None]
        ready = sum(r.ready for r in serving)
        decision = decide(
            service.spec,
            memory.scaler,
            load=load,
            now=now,
            wall=wall,
            current=before.desired_replicas,
            ready=ready,
        )
        last_scale = before.last_scale_time
        if decision.changed:
            self.store.record_event(service, "Scaled", decision.describe())
            last_scale = isoformat(wall)
        revision = service.spec.revision()
        views = [ReplicaView(r.job, r.revision, r.ready, r.created_at) for r in serving]
        wanted = plan(views, revision, decision.desired, service.spec.rolling_update)
        for record in records:
            if record.job in wanted.remove:
                self._drain(
                    service,
                    record,
                    now,
                    "scaled down"
                    if record.revision == revision
                    else "replaced by revision " + revision,
                )
        records += self._create(service, wanted.create, revision, now)
        self._write(service, before, records, decision.desired, revision, last_scale)
        return decision.desired, sum(r.ready for r in records if r.draining_since is None)

    # observing ----------------------------------------------------------------------------

    def _observe(
        self, service: Service, records: list[ReplicaRecord], now: float
    ) -> list[ReplicaRecord]:
        keys = [("Job", service.tenant, r.job) for r in records]
        with self.store.transaction(write=False) as tx:
            found = self.store.find_each(keys, conn=tx)
            uids = [job.metadata.uid or "" for job in found.values()]
            tasks = TaskRepository(self.store).for_jobs(uids, conn=tx) if uids else {}
        kept: list[ReplicaRecord] = []
        for record in records:
            job = found.get(("Job", service.tenant, record.job))
            if not isinstance(job, Job):
                self.prober.forget(record.job)  # stopped and deleted: the record goes
                continue
            task = next(iter(tasks.get(job.metadata.uid or "", [])), None)
            phase = job.status.phase if job.status is not None else JobPhase.PENDING
            if phase.finished:
                self._ended(service, record, job, phase)
                continue
            self._check_health(service, record, task, now)
            kept.append(record)
        return kept

    def _ended(self, service: Service, record: ReplicaRecord, job: Job, phase: JobPhase) -> None:
        """A replica's job ended: a stop that was asked, or a replica to replace."""
        if not record.stop_asked:
            message = job.status.message if job.status is not None else ""
            wait = self._wait_before_next()
            self.store.record_event(
                service,
                "ReplicaEnded",
                f"replica {record.job} ended ({phase.value}: {message}); a new one replaces it "
                f"in {wait:g}s",
                warning=True,
            )
        with self.context.transaction() as tx:
            TaskRepository(self.store).delete_job(job.metadata.uid or "", conn=tx)
            self.store.delete("Job", job.tenant, job.name, conn=tx)
        self.prober.forget(record.job)

    def _check_health(
        self, service: Service, record: ReplicaRecord, task: TaskRecord | None, now: float
    ) -> None:
        if record.draining_since is not None:
            record.ready = False
            if not record.stop_asked and record.stop_at is not None and now >= record.stop_at:
                record.stop_asked = stop_replica(self.store, service.tenant, record.job, record.why)
            return
        running = task is not None and task.phase == TaskPhase.RUNNING.value and task.node
        if not running or task is None or task.node is None:
            record.ready = False
            return
        record.node = task.node
        record.address = self.addresses.get(task.node, task.node)
        started = task.started_at.timestamp() if task.started_at is not None else now
        template = service.spec.template
        readiness = self.prober.check(
            record.job,
            READY,
            template.readiness_probe,
            record.address,
            record.port,
            started_at=started,
        )
        needed = template.readiness_probe.success_threshold if template.readiness_probe else 1
        allowed = template.readiness_probe.failure_threshold if template.readiness_probe else 1
        if readiness.passes >= needed:
            if not record.ready and not self._owns_port(service, record, task, now):
                return  # another process answered on the replica's port: replaced
            record.ready = True
            self.memory.failures = 0
        elif readiness.failures >= allowed:
            record.ready = False
        probe = template.liveness_probe
        if probe is None:
            return
        liveness = self.prober.check(
            record.job, LIVE, probe, record.address, record.port, started_at=started
        )
        if liveness.failures >= probe.failure_threshold:
            why = (
                f"liveness probe failed {liveness.failures} times ({liveness.last_reason}); "
                "replaced"
            )
            self.store.record_event(
                service, "ReplicaUnhealthy", f"{record.job}: {why}", warning=True
            )
            self._drain(service, record, now, why, at_once=True)

    def _owns_port(
        self, service: Service, record: ReplicaRecord, task: TaskRecord, now: float
    ) -> bool:
        """Before a replica is first listed: its own process holds its port, where the backend
        can tell (backends/service_endpoints.py); if another does, the replica is replaced."""
        owners = endpoint_owners(self.context.backend)
        if owners is None or task.request_id is None:
            return True
        if owners.endpoint_owner(task.request_id, record.port) is not False:
            return True
        self._wait_before_next()
        why = f"port {record.port} is held by a process outside the replica; replaced"
        self.store.record_event(service, "PortTaken", f"{record.job}: {why}", warning=True)
        self._drain(service, record, now, why, at_once=True)
        return False

    def _wait_before_next(self) -> float:
        """A replica failed without serving: the next waits longer (1 s doubling to 60 s)."""
        memory = self.memory
        memory.failures += 1
        wait = min(2.0 ** (memory.failures - 1), MAX_BACKOFF_SECONDS)
        memory.not_before = self.context.clock.now().timestamp() + wait
        return wait

    # acting -------------------------------------------------------------------------------

    def _drain(
        self,
        service: Service,
        record: ReplicaRecord,
        now: float,
        why: str,
        *,
        at_once: bool = False,
    ) -> None:
        """Out of the endpoints now; stopped after the drain time (at once if it never served
        or is broken)."""
        if record.draining_since is not None:
            return
        served = record.ready and not at_once
        record.draining_since = now
        record.stop_at = now + (service.spec.drain_seconds if served else 0.0)
        record.ready = False
        record.why = why
        if not served:
            record.stop_asked = stop_replica(self.store, service.tenant, record.job, why)

    @functools.cached_property
    def classes(self) -> dict[str, PriorityClass]:
        """The stored priority classes (read once per cycle, and only when a replica is made)."""
        found = self.store.list_objects("PriorityClass", "")
        return {c.name: c for c in found if isinstance(c, PriorityClass)}

    def _tenant(self, name: str) -> Tenant | None:
        try:
            found = self.store.get("Tenant", "", name)
        except NotFound:
            return None
        return found if isinstance(found, Tenant) else None

    def _create(
        self, service: Service, count: int, revision: str, now: float
    ) -> list[ReplicaRecord]:
        made: list[ReplicaRecord] = []
        if count <= 0 or now < self.memory.not_before:
            return made
        tenant = self._tenant(service.tenant)
        with self.context.transaction() as tx:
            for _ in range(count):
                port = service.spec.port or choose_port(self.taken, self.rng)
                for _attempt in range(3):
                    job = replica_job(
                        service,
                        replica_name(service.name),
                        port,
                        classes=self.classes,
                        tenant=tenant,
                    )
                    created = create_replica(self.store, job, tx)
                    if created is not None:
                        self.taken.add(port)
                        made.append(
                            ReplicaRecord(
                                job=created.name, revision=revision, port=port, created_at=now
                            )
                        )
                        break
        return made

    def _write(
        self,
        service: Service,
        before: ServiceStatus,
        records: list[ReplicaRecord],
        desired: int,
        revision: str,
        last_scale: str | None,
    ) -> None:
        serving = [r for r in records if r.draining_since is None]
        ready = [r for r in serving if r.ready]
        endpoints = [
            Endpoint(replica=r.job, address=r.address, port=r.port, revision=r.revision)
            for r in ready
        ]
        if ready:
            phase, reason = "Running", f"{len(ready)} of {desired} replicas ready"
        elif desired == 0 and not serving:
            phase, reason = "Idle", "scaled to zero: the next request starts a replica"
        else:
            phase, reason = "Pending", "no replica ready yet"
        status = ServiceStatus(
            phase=phase,
            reason=reason,
            revision=revision,
            desired_replicas=desired,
            replicas=len(serving),
            ready_replicas=len(ready),
            updated_replicas=sum(r.revision == revision for r in serving),
            endpoints=endpoints,
            url=f"/services/{service.tenant}/{service.name}/",
            last_scale_time=last_scale,
            replica_jobs=records,
        )
        if status.model_dump() == before.model_dump():
            return
        with self.context.transaction() as tx:
            self.store.write_status(service, status, conn=tx)
        if before.phase != phase:
            self.store.record_event(service, phase, reason)
