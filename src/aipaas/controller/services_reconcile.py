"""One service, one cycle: replicas observed, probed, count decided, replicas started and
stopped, status written (controller/services.py calls it for each service).

Probes follow Kubernetes: a replica's startup probe runs until it passes once (failing
``failureThreshold`` times in a row restarts the replica); only then do its readiness probe
(an endpoint while it passes) and its liveness probe (a restart when it fails) run. A replica
that fails, exits on its own or is killed by a probe, makes the next start wait: 10 s doubling
to 5 minutes (crash_back_off), reset once a replica ran 10 minutes; the service's status says
CrashLoopBackOff with the last exit code and the end of the replica's log meanwhile.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from aipaas.api.job import Job, JobPhase, TaskPhase
from aipaas.api.priority import PriorityClass
from aipaas.api.service import (
    CrashLoop,
    Endpoint,
    Probe,
    ReplicaRecord,
    Service,
    ServiceStatus,
)
from aipaas.api.service_scaling import Metric
from aipaas.api.tenancy import Tenant
from aipaas.autoscale.replicas import Load, ScalerMemory, decide
from aipaas.autoscale.service_rollout import ReplicaView, plan
from aipaas.backends.gpu_utilization import gpu_utilization_of
from aipaas.backends.probe_exec import probe_exec_of
from aipaas.backends.service_endpoints import endpoint_owners
from aipaas.clock import isoformat
from aipaas.controller.extensions import CycleContext
from aipaas.controller.services_probe import LIVE, READY, STARTUP, ExecRunner, Prober
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
#: the wait before the start that follows a first failure (Kubernetes' CrashLoopBackOff)
BACKOFF_FIRST_SECONDS = 10.0
#: the longest wait before a replica replaces one that failed
MAX_BACKOFF_SECONDS = 300.0
#: a replica that ran this long resets the back-off
BACKOFF_RESET_SECONDS = 600.0
#: how much of a failed replica's log the status keeps
LOG_TAIL_BYTES = 2048
LOG_TAIL_LINES = 10


def crash_back_off(failures: int) -> float:
    """The wait before the next start after ``failures`` failures in a row (1 or more)."""
    return min(BACKOFF_FIRST_SECONDS * 2.0 ** (max(failures, 1) - 1), MAX_BACKOFF_SECONDS)


def log_tail(path: str | None) -> str:
    """The last lines of a replica's log (empty when it cannot be read here)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as file:
            file.seek(0, 2)
            size = file.tell()
            file.seek(max(size - LOG_TAIL_BYTES, 0))
            data = file.read()
    except OSError:
        return ""
    lines = data.decode(errors="replace").splitlines()
    if size > LOG_TAIL_BYTES and lines:
        lines = lines[1:]  # the first may be cut
    return "\n".join(lines[-LOG_TAIL_LINES:])


@dataclass
class ServiceMemory:
    """What the controller remembers of one service between cycles (lost on restart: the
    scaler starts again from the status's desired count)."""

    scaler: ScalerMemory = field(default_factory=ScalerMemory)
    #: replicas that failed in a row (a crash loop waits longer before each start)
    failures: int = 0
    not_before: float = 0.0
    crash: CrashLoop | None = None
    #: the crash loop was read back from the status (after a controller restart)
    restored: bool = False


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
        #: the GPUs of the service of the moment's started replicas: job -> (node, indices)
        self.gpu_use: dict[str, tuple[str, tuple[int, ...]]] = {}

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
        if not memory.restored:
            memory.restored = True
            _restore(memory, before.crash_loop)
        self.gpu_use = {}
        records = self._observe(service, [r.model_copy() for r in before.replica_jobs], now)
        serving = [r for r in records if r.draining_since is None]
        ready = sum(r.ready for r in serving)
        scaling = service.spec.autoscaling
        if load is not None and scaling is not None and scaling.metric is Metric.GPU:
            load = replace(load, gpu_utilization=self._gpu_utilization(serving))
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
        self._write(service, before, records, decision.desired, revision, last_scale, now)
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
                self._ended(service, record, job, phase, task, now)
                continue
            self._check_health(service, record, job, task, now)
            kept.append(record)
        return kept

    def _ended(
        self,
        service: Service,
        record: ReplicaRecord,
        job: Job,
        phase: JobPhase,
        task: TaskRecord | None,
        now: float,
    ) -> None:
        """A replica's job ended: a stop that was asked, or a failure (the next start backs
        off)."""
        if not record.stop_asked:
            message = job.status.message if job.status is not None else ""
            code = task.exit_code if task is not None else None
            why = f"exited with code {code}" if code is not None else f"ended ({phase.value})"
            if message:
                why += f": {message}"
            self._back_off(service, record, task, why[:300], now)
        with self.context.transaction() as tx:
            TaskRepository(self.store).delete_job(job.metadata.uid or "", conn=tx)
            self.store.delete("Job", job.tenant, job.name, conn=tx)
        self.prober.forget(record.job)

    def _back_off(
        self,
        service: Service,
        record: ReplicaRecord,
        task: TaskRecord | None,
        why: str,
        now: float,
    ) -> float:
        """A replica failed: the next start waits (10 s doubling to 5 min); the status says
        so. A replica that ran 10 minutes before it failed starts the count again."""
        memory = self.memory
        started = task.started_at.timestamp() if task and task.started_at else None
        if started is not None and now - started >= BACKOFF_RESET_SECONDS:
            memory.failures = 0
        memory.failures += 1
        wait = crash_back_off(memory.failures)
        memory.not_before = now + wait
        memory.crash = CrashLoop(
            replica=record.job,
            restarts=memory.failures,
            reason=why,
            last_exit_code=task.exit_code if task is not None else None,
            log_tail=log_tail(task.log_path if task is not None else None),
            next_start=isoformat(datetime.fromtimestamp(memory.not_before, UTC)),
            back_off_seconds=wait,
        )
        self.store.record_event(
            service,
            "BackOff",
            f"replica {record.job} {why}; the next replica starts in {wait:g}s "
            f"({memory.failures} failed in a row)",
            warning=True,
        )
        return wait

    def _check_health(
        self,
        service: Service,
        record: ReplicaRecord,
        job: Job,
        task: TaskRecord | None,
        now: float,
    ) -> None:
        if record.draining_since is not None:
            record.ready = False
            record.state, record.message = "Draining", record.why
            if not record.stop_asked and record.stop_at is not None and now >= record.stop_at:
                record.stop_asked = stop_replica(self.store, service.tenant, record.job, record.why)
            return
        running = task is not None and task.phase == TaskPhase.RUNNING.value and task.node
        if not running or task is None or task.node is None:
            record.ready = False
            record.state = "Pending"
            status = job.status
            record.message = (
                f"{status.reason}: {status.message}".strip(": ") if status is not None else ""
            )[:300] or "waiting to be placed and started"
            return
        record.node = task.node
        record.address = self.addresses.get(task.node, task.node)
        started = task.started_at.timestamp() if task.started_at is not None else now
        template = service.spec.template
        run_exec = self._exec_runner(task)
        if not record.started and not self._started(service, record, task, now, run_exec):
            return
        if task.gpus:
            self.gpu_use[record.job] = (task.node, tuple(task.gpus))
        if self.memory.failures and now - started >= BACKOFF_RESET_SECONDS:
            self.memory.failures, self.memory.crash = 0, None  # ran 10 minutes: reset
        probe = template.readiness
        readiness = self.prober.check(
            record.job,
            READY,
            probe,
            record.address,
            record.port,
            started_at=started,
            run_exec=run_exec,
        )
        needed = probe.success_threshold if probe is not None else 1
        allowed = probe.failure_threshold if probe is not None else 1
        if readiness.passes >= needed:
            if not record.ready and not self._owns_port(service, record, task, now):
                return  # another process answered on the replica's port: replaced
            record.ready = True
        elif readiness.failures >= allowed:
            record.ready = False
        if record.ready:
            record.state, record.message = "Ready", ""
        else:
            what = probe.action if probe is not None else f"TCP connection to port {record.port}"
            record.state = "NotReady"
            record.message = f"readiness probe ({what}): {readiness.last_reason or 'pending'}"
        liveness_probe = template.liveness_probe
        if liveness_probe is None:
            return
        liveness = self.prober.check(
            record.job,
            LIVE,
            liveness_probe,
            record.address,
            record.port,
            started_at=started,
            run_exec=run_exec,
        )
        if liveness.failures >= liveness_probe.failure_threshold:
            why = f"failed its liveness probe {liveness.failures} times ({liveness.last_reason})"
            self.store.record_event(
                service, "ReplicaUnhealthy", f"{record.job}: {why}; restarted", warning=True
            )
            self._back_off(service, record, task, why, now)
            self._drain(service, record, now, why, at_once=True)

    def _started(
        self,
        service: Service,
        record: ReplicaRecord,
        task: TaskRecord,
        now: float,
        run_exec: ExecRunner | None,
    ) -> bool:
        """Whether the replica's startup probe passed (now or before; True without one). No
        other probe runs before; failing ``failureThreshold`` times restarts the replica."""
        probe: Probe | None = service.spec.template.startup_probe
        if probe is None:
            record.started = True
            return True
        started = task.started_at.timestamp() if task.started_at is not None else now
        state = self.prober.check(
            record.job,
            STARTUP,
            probe,
            record.address,
            record.port,
            started_at=started,
            run_exec=run_exec,
        )
        if state.passes >= 1:
            record.started = True
            self.prober.forget(record.job, (STARTUP,))
            return True
        record.ready = False
        record.state = "Starting"
        record.message = f"startup probe ({probe.action}): {state.last_reason or 'pending'}"
        if state.failures >= probe.failure_threshold:
            why = f"failed its startup probe {state.failures} times ({state.last_reason})"
            self._back_off(service, record, task, why, now)
            self._drain(service, record, now, why, at_once=True)
        return False

    def _exec_runner(self, task: TaskRecord) -> ExecRunner | None:
        """How exec probes of the replica run: through its backend, as its user."""
        execs = probe_exec_of(self.context.backend)
        request = task.request_id
        if execs is None or request is None:
            return None
        return lambda command, timeout: execs.probe_exec(request, command, timeout)

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
        why = f"port {record.port} is held by a process outside the replica; replaced"
        self._back_off(service, record, None, why, now)
        self.store.record_event(service, "PortTaken", f"{record.job}: {why}", warning=True)
        self._drain(service, record, now, why, at_once=True)
        return False

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
    def utilization(self) -> Mapping[tuple[str, int], float] | None:
        """How busy each GPU is, read once per cycle; None where the backend cannot tell."""
        reader = gpu_utilization_of(self.context.backend)
        if reader is None:
            return None
        try:
            return reader.gpu_utilization()
        except Exception:  # a failed reading is no reading, not a failed cycle
            log.exception("services: the GPU utilisation could not be read")
            return None

    def _gpu_utilization(self, serving: list[ReplicaRecord]) -> float | None:
        """The summed GPU utilisation (percent) of the started replicas: each replica's the
        mean of its GPUs'. None when the backend cannot tell, or reads none of their GPUs."""
        reading = self.utilization
        if reading is None:
            return None
        total, unread = 0.0, 0
        for record in serving:
            node, gpus = self.gpu_use.get(record.job, ("", ()))
            values = [reading[(node, index)] for index in gpus if (node, index) in reading]
            if values:
                total += sum(values) / len(values)
            elif gpus:
                unread += 1
        return None if unread and total == 0 else total

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
        now: float,
    ) -> None:
        serving = [r for r in records if r.draining_since is None]
        ready = [r for r in serving if r.ready]
        endpoints = [
            Endpoint(replica=r.job, address=r.address, port=r.port, revision=r.revision)
            for r in ready
        ]
        message = ""
        crash = self.memory.crash
        if ready:
            phase, reason = "Running", f"{len(ready)} of {desired} replicas ready"
        elif desired == 0 and not serving:
            phase, reason = "Idle", "scaled to zero: the next request starts a replica"
        else:
            phase, reason, message = "Pending", "NoReplicaReady", "no replica ready yet"
            waiting = [r for r in serving if r.message]
            if crash is not None and now < self.memory.not_before and not serving:
                reason = "CrashLoopBackOff"
                message = (
                    f"replica {crash.replica} {crash.reason}; {crash.restarts} failed in a "
                    f"row, the next starts at {crash.next_start}"
                )
            elif waiting:
                reason = waiting[0].state
                message = f"replica {waiting[0].job}: {waiting[0].message}"
        status = ServiceStatus(
            phase=phase,
            reason=reason,
            message=message,
            revision=revision,
            desired_replicas=desired,
            replicas=len(serving),
            ready_replicas=len(ready),
            updated_replicas=sum(r.revision == revision for r in serving),
            endpoints=endpoints,
            url=f"/services/{service.tenant}/{service.name}/",
            last_scale_time=last_scale,
            replica_jobs=records,
            crash_loop=crash,
        )
        if status.model_dump() == before.model_dump():
            return
        with self.context.transaction() as tx:
            self.store.write_status(service, status, conn=tx)
        if before.phase != phase or (before.reason != reason and reason == "CrashLoopBackOff"):
            self.store.record_event(service, phase, f"{reason}: {message}" if message else reason)


def _restore(memory: ServiceMemory, crash: CrashLoop | None) -> None:
    """A controller that starts again keeps a service's crash loop (its status has it)."""
    if crash is None:
        return
    memory.failures, memory.crash = crash.restarts, crash
    try:
        memory.not_before = datetime.fromisoformat(crash.next_start).timestamp()
    except ValueError:
        memory.not_before = 0.0
