"""One controller cycle, in numbered steps (see ``Controller.run_cycle``).

1. nodes: refresh the inventory from the backend and publish Node objects;
2. observe: ask the backend what became of every started task;
3. advance: per job, carry out cancellation, restarts with backoff, failure and completion;
4. admit and place: pending jobs in priority order pass quotas, then the scheduler places their
   gang; records are committed before the backend is asked to start anything;
5. write back job status and events (only what changed), and metrics.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from aipaas.api.devices import (
    AllocationResult,
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    parse_device_object,
)
from aipaas.api.dra import (
    ClaimStatus,
    DeviceClassObject,
    ResourceClaimObject,
    ResourceClaimTemplateObject,
    ResourceSliceObject,
    wrap_device,
)
from aipaas.api.job import CANCEL_ANNOTATION, Job, JobPhase, JobStatus, TaskPhase
from aipaas.api.meta import Object, ObjectMeta
from aipaas.api.node import Node, NodeGpus, NodeSpec, NodeStatus
from aipaas.api.queue import Queue
from aipaas.api.resources import TaskClaim
from aipaas.api.tenancy import Tenant
from aipaas.backends.base import Backend, NodeInfo, TaskState
from aipaas.clock import Clock, SystemClock, isoformat
from aipaas.controller.launch import log_path, make_request, request_id, task_spec
from aipaas.controller.placement import Devices, Placer, Pod, SliceIndex
from aipaas.controller.task_devices import (
    SHORT_FORM_ANNOTATION,
    claim_devices,
    compiles_to_claim,
    short_form_claim,
    short_form_claim_name,
)
from aipaas.controller.work import (
    ACTIVE,
    JobWork,
    fair_order,
    job_status,
    job_usage,
    status_events,
)
from aipaas.devices.shortform import DEFAULT_CLASS, default_class
from aipaas.devices.topology_files import DRIVER
from aipaas.metering.metrics import Metrics
from aipaas.store import Store, TaskRecord, TaskRepository
from aipaas.tenancy.quota import Usage, exceeded

log = logging.getLogger("aipaas.controller")

DELETE_ANNOTATION = "aipaas.dev/delete-requested"
PUBLISHED_LABEL = "aipaas.dev/published-by"
GENERATED_ANNOTATION = "aipaas.dev/from-template"  # a claim made for one task replica
FINISHED = [p.value for p in JobPhase if p.finished]


class Controller:
    def __init__(
        self,
        store: Store,
        backend: Backend,
        *,
        log_dir: Path,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
        policy: str = "default",
        backoff_seconds: float = 1.0,
        backoff_max_seconds: float = 60.0,
        stop_grace_seconds: float = 5.0,
        inventory_seconds: float = 10.0,
    ) -> None:
        self.store = store
        self.tasks = TaskRepository(store)
        self.backend = backend
        self.log_dir = log_dir.resolve()
        self.metrics = metrics or Metrics()
        self.clock = clock or SystemClock()
        self.policy = policy
        self.backoff_seconds = backoff_seconds
        self.backoff_max_seconds = backoff_max_seconds
        self.stop_grace_seconds = stop_grace_seconds
        self.inventory_seconds = inventory_seconds
        self.nodes: list[NodeInfo] = []
        self.slices: list[ResourceSlice] = []
        self._admitted: list[JobWork] = []
        self._node_objects: dict[str, Object] = {}
        self._node_status: dict[str, NodeStatus] = {}
        self._inventory_at: float | None = None
        self._claim_waiting: dict[tuple[str, str], str] = {}
        self._slice_index = SliceIndex()
        self._gpu_devices = False  # the inventory publishes GPU devices: gpu: compiles
        self._compiled_stored: set[tuple[str, str]] = set()  # (tenant, name) of such claims
        self.cycles = 0

    # 0. the cycle ---------------------------------------------------------------------------

    def run_cycle(self) -> None:
        started = self.clock.monotonic()
        self._refresh_nodes()
        jobs = [
            j
            for j in self.store.list_objects("Job", None, exclude_phases=FINISHED)
            if isinstance(j, Job)
        ]
        records = self.tasks.for_jobs([j.metadata.uid or "" for j in jobs])
        work = [JobWork(j, records[j.metadata.uid or ""]) for j in jobs]
        self._observe(work)
        for item in work:
            self._advance(item)
        placer = self._place(work)
        self._write_back(work)
        self._write_node_status(placer)
        self._publish_metrics(work, placer)
        self.cycles += 1
        self.metrics.cycle_seconds.observe(self.clock.monotonic() - started)

    # 1. nodes ---------------------------------------------------------------------------------

    def _refresh_nodes(self) -> None:
        now = self.clock.monotonic()
        if self._inventory_at is not None and now - self._inventory_at < self.inventory_seconds:
            return
        self._inventory_at = now
        inventory = self.backend.inventory()
        self.nodes = list(inventory.nodes)
        self.slices = list(inventory.slices)
        self._publish_slices()
        for info in self.nodes:
            wanted = Node(
                metadata=ObjectMeta(name=info.name, labels=dict(info.labels)),
                spec=NodeSpec(
                    backend=info.backend,
                    cpu=f"{info.cpu_milli}m"
                    if info.cpu_milli % 1000
                    else str(info.cpu_milli // 1000),
                    memory=f"{info.memory_mib}Mi",
                    gpus=NodeGpus(
                        count=info.gpu_count,
                        model=info.gpu_model,
                        memory=f"{info.gpu_memory_mib}Mi" if info.gpu_memory_mib else None,
                    ),
                ),
            )
            current = self.store.find("Node", "", info.name)
            if current is None:
                current = self.store.create(wanted)
                self.store.record_event(
                    current, "Registered", f"reported by backend {info.backend}"
                )
            elif current.to_wire().get("spec") != wanted.to_wire().get("spec"):
                current = self.store.update(wanted)
            self._node_objects[info.name] = current
        reported = {info.name for info in self.nodes}
        for node in self.store.list_objects("Node", ""):
            if node.name not in reported:
                self._node_objects[node.name] = node  # gone from the backend: not ready

    def _publish_slices(self) -> None:
        """The backend's ResourceSlices as stored objects (created, updated, or deleted when the
        backend no longer reports them); slices applied by an admin are left alone."""
        reported = set()
        for item in self.slices:
            wanted = wrap_device(item)
            meta = wanted.metadata.model_copy(
                update={"labels": {**wanted.metadata.labels, PUBLISHED_LABEL: "backend"}}
            )
            wanted = wanted.model_copy(update={"metadata": meta})
            reported.add(wanted.name)
            current = self.store.find("ResourceSlice", "", wanted.name)
            if current is None:
                self.store.create(wanted)
            elif current.to_wire().get("spec") != wanted.to_wire().get("spec"):
                self.store.update(wanted)
        for stored in self.store.list_objects("ResourceSlice", ""):
            if stored.metadata.labels.get(PUBLISHED_LABEL) and stored.name not in reported:
                self.store.delete("ResourceSlice", "", stored.name)

    def _write_node_status(self, placer: Placer) -> None:
        """Node status: ready while reported; what is allocated (written when it changes)."""
        allocated = placer.allocated()
        changes = []
        for name, node in self._node_objects.items():
            cpu, memory, gpus = allocated.get(name, (0, 0, 0.0))
            status = NodeStatus(
                ready=name in allocated,
                allocated_cpu=f"{cpu}m",
                allocated_memory=f"{memory}Mi",
                allocated_gpus=gpus,
            )
            if self._node_status.get(name) != status:
                changes.append((node, status))
                self._node_status[name] = status
        if changes:
            with self.store.transaction() as tx:
                self.store.write_statuses(changes, conn=tx)

    # 2. observe -------------------------------------------------------------------------------

    def _observe(self, work: list[JobWork]) -> None:
        started = [
            (item, r) for item in work for r in item.records if r.phase in ACTIVE and r.request_id
        ]
        if not started:
            return
        answers = self.backend.status([r.request_id or "" for _, r in started])
        now = self.clock.now()
        for item, record in started:
            answer = answers[record.request_id or ""]
            if answer.state is TaskState.UNKNOWN:
                if record.phase == TaskPhase.STARTING:
                    self._start(item, record)  # the start was lost in a crash: ask again
                else:
                    item.set(
                        record.with_(
                            phase=TaskPhase.LOST.value,
                            finished_at=now,
                            message="the backend does not know the task",
                        )
                    )
                    item.event("TaskLost", f"{record.name}: the backend does not know it", True)
                continue
            if answer.state is TaskState.RUNNING:
                if record.phase == TaskPhase.STARTING:
                    item.set(record.with_(phase=TaskPhase.RUNNING.value, started_at=now))
                continue
            phase = {
                TaskState.SUCCEEDED: TaskPhase.SUCCEEDED,
                TaskState.FAILED: TaskPhase.FAILED,
                TaskState.LOST: TaskPhase.LOST,
            }[answer.state]
            item.set(
                record.with_(
                    phase=phase.value,
                    exit_code=answer.exit_code,
                    finished_at=now,
                    message=answer.message,
                )
            )
            if phase is TaskPhase.SUCCEEDED:
                item.event("TaskSucceeded", f"{record.name} exited with code 0")
            else:
                item.event(
                    "TaskFailed", f"{record.name} {phase.value.lower()}: {answer.message}", True
                )

    # 3. advance -------------------------------------------------------------------------------

    def _advance(self, item: JobWork) -> None:
        job = item.job
        if CANCEL_ANNOTATION in job.metadata.annotations:
            self._finish(item, JobPhase.CANCELLED, "Cancelled", "the job was cancelled")
            return
        now = self.clock.monotonic()
        for record in list(item.records):
            if record.phase in (TaskPhase.FAILED.value, TaskPhase.LOST.value):
                spec = task_spec(job, record.group_name)
                if spec.restart_policy == "OnFailure" and record.attempt < spec.backoff_limit:
                    delay = min(self.backoff_seconds * 2**record.attempt, self.backoff_max_seconds)
                    item.set(record.with_(phase=TaskPhase.PENDING.value, restart_at=now + delay))
                    item.event(
                        "TaskRestarting",
                        f"{record.name} restarts in {delay:g}s "
                        f"(restart {record.attempt + 1} of {spec.backoff_limit})",
                    )
                else:
                    why = (
                        f"{record.name} {record.phase.lower()}"
                        + (
                            f" with exit code {record.exit_code}"
                            if record.exit_code is not None
                            else ""
                        )
                        + (f" after {record.attempt} restarts" if record.attempt else "")
                    )
                    self._finish(item, JobPhase.FAILED, "TaskFailed", why)
                    return
            elif (
                record.phase == TaskPhase.PENDING.value
                and record.restart_at is not None
                and record.restart_at <= now
                and record.node is not None
            ):
                restarted = record.with_(
                    attempt=record.attempt + 1,
                    restart_at=None,
                    exit_code=None,
                    message="",
                    phase=TaskPhase.STARTING.value,
                )
                restarted = restarted.with_(request_id=request_id(restarted))
                item.set(restarted)
                self._save(item)  # durable before the backend is asked
                self._start(item, restarted)
        if item.records and all(r.phase == TaskPhase.SUCCEEDED.value for r in item.records):
            self._finish(
                item, JobPhase.SUCCEEDED, "Succeeded", f"all {len(item.records)} tasks succeeded"
            )

    def _finish(self, item: JobWork, phase: JobPhase, reason: str, message: str) -> None:
        """End the job: stop what still runs, close every open task record."""
        now = self.clock.now()
        for record in item.records:
            if record.phase in ACTIVE and record.request_id:
                self.backend.stop(record.request_id, self.stop_grace_seconds)
            if not TaskPhase(record.phase).finished:
                item.set(
                    record.with_(
                        phase=TaskPhase.CANCELLED.value,
                        finished_at=now,
                        restart_at=None,
                        message=message,
                    )
                )
        item.phase, item.reason, item.message = phase, reason, message
        item.event(phase.value, message, phase is not JobPhase.SUCCEEDED)

    # 4. admit and place -------------------------------------------------------------------

    def _place(self, work: list[JobWork]) -> Placer:
        placer = Placer(self.nodes, self.policy, self._devices(work))
        tenant_use: dict[str, Usage] = defaultdict(Usage)
        queue_use: dict[tuple[str, str], Usage] = defaultdict(Usage)
        for item in work:
            for record in item.records:
                if record.node is None or TaskPhase(record.phase).finished:
                    continue
                pod = self._pod(item.job, record)
                problem = placer.hold(pod, record.node, record.gpus, record.gpu_milli)
                if problem is not None:
                    log.warning("cannot hold %s of job %s: %s", record.name, item.job.name, problem)
                    item.set(record.with_(phase=TaskPhase.LOST.value, message=problem))
                    continue
                usage = Usage.of(pod.amounts)
                tenant_use[item.job.tenant] += usage
                queue_use[(item.job.tenant, item.job.spec.queue)] += usage
        pending = [i for i in work if not i.records and i.phase is None]
        tenants = {
            t.name: t for t in self.store.list_objects("Tenant", "") if isinstance(t, Tenant)
        }
        queues = {
            (q.tenant, q.name): q
            for q in self.store.list_objects("Queue", None)
            if isinstance(q, Queue)
        }
        self._admitted = []
        for item in fair_order(pending, queues, queue_use, placer.capacity()):
            self._admit(item, placer, tenants, queues, tenant_use, queue_use)
        # The records of every admitted job are durable (one transaction) before the backend
        # is asked to start anything: a crash in between is repaired by asking again.
        with self.store.transaction() as tx:
            for item in self._admitted:
                self.tasks.insert_many(item.records, conn=tx)
        for item in self._admitted:
            for record in list(item.records):
                if record.phase == TaskPhase.STARTING.value:
                    self._start(item, record)
        for item in work:
            if item.phase is None:
                self._place_stragglers(item, placer)
        return placer

    def _place_stragglers(self, item: JobWork, placer: Placer) -> None:
        """Replicas beyond minAvailable start one by one as room appears."""
        for record in list(item.records):
            if record.node is not None or record.phase != TaskPhase.PENDING.value:
                continue
            result = placer.place([self._pod(item.job, record)])
            if isinstance(result, tuple):
                return
            slot = result[0]
            self._claims_allocated(item.job, record.name, slot.allocations)
            placed = record.with_(
                node=slot.node,
                node_index=slot.node_index,
                gpus=slot.gpus,
                gpu_milli=slot.gpu_milli,
                phase=TaskPhase.STARTING.value,
            )
            placed = placed.with_(request_id=request_id(placed))
            item.set(placed)
            self._save(item)
            self._start(item, placed)

    def _admit(
        self,
        item: JobWork,
        placer: Placer,
        tenants: dict[str, Tenant],
        queues: dict[tuple[str, str], Queue],
        tenant_use: dict[str, Usage],
        queue_use: dict[tuple[str, str], Usage],
    ) -> None:
        job = item.job
        if job.spec.depends_on and not self._dependencies_met(item):
            return
        wanted = job_usage(job)
        tenant = tenants.get(job.tenant)
        queue = queues.get((job.tenant, job.spec.queue))
        if tenant is None or queue is None:
            missing = f"tenant {job.tenant}" if tenant is None else f"queue {job.spec.queue}"
            item.reason, item.message = "Waiting", f"{missing} does not exist"
            return
        why = exceeded(tenant.spec.quota, tenant_use[job.tenant], wanted)
        if why is not None:
            item.reason, item.message = "QuotaExceeded", f"tenant {job.tenant} quota: {why}"
            return
        key = (job.tenant, job.spec.queue)
        why = exceeded(queue.spec.quota, queue_use[key], wanted)
        if why is not None:
            item.reason, item.message = "QuotaExceeded", f"queue {job.spec.queue} quota: {why}"
            return
        records = self._new_records(job)
        gang = records[: job.spec.gang_size]
        problem = self._claims_problem(job)
        if problem is not None:
            item.reason, item.message = "Unschedulable", problem
            return
        pods = [self._pod(job, r) for r in gang]
        result = placer.place(pods)
        if isinstance(result, tuple):
            hint = [
                f"claim {c.metadata.name} is what resources.gpu of task {r.group_name} compiles to"
                for p, r in zip(pods, gang, strict=True)
                if p.gpu_claim
                for c in p.claims[-1:]
            ][:1]
            item.reason, item.message = "Unschedulable", "; ".join((*result, *hint))
            self._claims_wait(job, item.message)
            return
        for where in result:
            self._claims_allocated(job, where.name.rsplit("/", 1)[-1], where.allocations)
        placed = dict(zip((r.name for r in gang), result, strict=True))
        for index, record in enumerate(records):
            slot = placed.get(record.name)
            if slot is None:
                continue
            record = record.with_(
                node=slot.node,
                node_index=slot.node_index,
                gpus=slot.gpus,
                gpu_milli=slot.gpu_milli,
                phase=TaskPhase.STARTING.value,
            )
            records[index] = record.with_(request_id=request_id(record))
        item.records = records
        item.changed = {r.name for r in records}
        tenant_use[job.tenant] += wanted
        queue_use[key] += wanted
        created = job.metadata.creation_timestamp
        if created:
            latency = self.clock.now() - datetime.fromisoformat(created.replace("Z", "+00:00"))
            self.metrics.scheduling_latency.observe(max(latency.total_seconds(), 0.0))
        nodes = sorted({slot.node for slot in result})
        item.reason, item.message = "Scheduled", f"{len(result)} tasks placed on {', '.join(nodes)}"
        item.event("Scheduled", item.message)
        item.changed.clear()
        self._admitted.append(item)

    def _dependencies_met(self, item: JobWork) -> bool:
        """All of ``dependsOn`` succeeded; a failed or cancelled one fails this job."""
        for name in item.job.spec.depends_on:
            other = self.store.find("Job", item.job.tenant, name)
            if not isinstance(other, Job):
                item.reason, item.message = "WaitingForDependencies", f"job {name} does not exist"
                return False
            phase = other.status.phase if other.status else JobPhase.PENDING
            if phase in (JobPhase.FAILED, JobPhase.CANCELLED):
                self._finish(
                    item, JobPhase.FAILED, "DependencyFailed", f"job {name} {phase.value.lower()}"
                )
                return False
            if phase is not JobPhase.SUCCEEDED:
                item.reason = "WaitingForDependencies"
                item.message = f"waiting for job {name} ({phase.value})"
                return False
        return True

    def _new_records(self, job: Job) -> list[TaskRecord]:
        records = []
        rank = 0
        for task in job.spec.tasks:
            for index in range(task.replicas):
                name = f"{task.name}-{index}"
                records.append(
                    TaskRecord(
                        job_uid=job.metadata.uid or "",
                        tenant=job.tenant,
                        job_name=job.name,
                        name=name,
                        group_name=task.name,
                        index=index,
                        rank=rank,
                        log_path=log_path(self.log_dir, job, name),
                    )
                )
                rank += 1
        return records

    def _pod(self, job: Job, record: TaskRecord) -> Pod:
        spec = task_spec(job, record.group_name)
        gpu = spec.resources.gpu
        models = (gpu.model,) if gpu is not None and gpu.model else ()
        claims = []
        for ref in spec.resources.claims:
            claim = self._claim_for(job, record.name, ref)
            if claim is None:
                continue
            if ref.resource_claim_name is None:
                claims.append(claim.model_copy(update={"status": None}))
                continue
            # A named claim is one object for every task that names it (the uid tells the
            # device ledger so); once allocated, its allocation pins its consumers' node.
            meta = claim.metadata.model_copy(
                update={"uid": f"{job.tenant}/{ref.resource_claim_name}", "namespace": job.tenant}
            )
            allocated = claim.status is not None and claim.status.allocation is not None
            claims.append(
                claim.model_copy(
                    update={"metadata": meta, **({} if allocated else {"status": None})}
                )
            )
        compiled = self._short_form(job, record)
        if compiled is not None:
            claims.append(compiled)
        return Pod(
            f"{job.tenant}/{job.name}/{record.name}",
            spec.resources.amounts(),
            models,
            tuple(claims),
            gpu_claim=compiled is not None,
        )

    def _short_form(self, job: Job, record: TaskRecord) -> ResourceClaim | None:
        """The claim ``resources.gpu`` compiles to when it goes to the device allocator:
        whole GPUs, on a cluster that publishes GPU devices. A placed task keeps the path it
        was placed on: the claim when its compiled claim is stored, else the GPU count."""
        gpu = task_spec(job, record.group_name).resources.gpu
        if gpu is None or not compiles_to_claim(gpu):
            return None
        if record.node is not None:
            name = short_form_claim_name(job, record.name)
            if (job.tenant, name) not in self._compiled_stored:
                return None
        elif not self._gpu_devices:
            return None
        return short_form_claim(job, record.name, gpu)

    # DRA claims -------------------------------------------------------------------------------

    def _claim_for(self, job: Job, task: str, ref: TaskClaim) -> ResourceClaim | None:
        """The claim a task replica uses: the named one, or the one its template makes (stored
        once allocated, under ``JOB-TASK-NAME``)."""
        name = _claim_name(job, task, ref)
        stored = self.store.find("ResourceClaim", job.tenant, name)
        if isinstance(stored, ResourceClaimObject):
            return stored.claim()
        if ref.resource_claim_template_name is None:
            return None
        template = self.store.find(
            "ResourceClaimTemplate", job.tenant, ref.resource_claim_template_name
        )
        if not isinstance(template, ResourceClaimTemplateObject):
            return None
        made = parse_device_object(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": job.tenant},
                "spec": template.spec.get("spec", {}),
            }
        )
        assert isinstance(made, ResourceClaim)
        return made

    def _devices(self, work: list[JobWork]) -> Devices:
        """Slices, classes and allocated claims; claims whose tasks ended are freed first (a
        claim made from a template is deleted, as Kubernetes deletes a pod's claim)."""
        active = {
            (item.job.metadata.uid or "", f"{item.job.name}/{record.name}")
            for item in work
            for record in item.records
            if record.node is not None and not TaskPhase(record.phase).finished
        }
        allocated = []
        self._compiled_stored = set()
        for obj in self.store.list_objects("ResourceClaim", None):
            if not isinstance(obj, ResourceClaimObject) or obj.status is None:
                continue
            if not obj.status.allocation:
                continue
            users = [
                r
                for r in obj.status.reserved_for
                if (r.get("uid", ""), r.get("name", "")) in active
            ]
            if not users:
                # The last consumer ended: deallocated, as Kubernetes does when reservedFor
                # becomes empty (a claim made for one replica is deleted with it).
                annotations = obj.metadata.annotations
                if GENERATED_ANNOTATION in annotations or SHORT_FORM_ANNOTATION in annotations:
                    self.store.delete("ResourceClaim", obj.tenant, obj.name)
                    continue
                self.store.update_status(obj, None)
                self.store.record_event(obj, "Deallocated", "its tasks ended; devices freed")
                continue
            if len(users) != len(obj.status.reserved_for):
                # Consumers that ended leave reservedFor; the others keep the devices.
                obj = self.store.update_status(
                    obj, ClaimStatus(allocation=obj.status.allocation, reserved_for=users)
                )
                assert isinstance(obj, ResourceClaimObject)
            if SHORT_FORM_ANNOTATION in obj.metadata.annotations:
                self._compiled_stored.add((obj.tenant, obj.name))
            allocated.append(obj.claim())
        slices = [
            s.device()
            for s in self.store.list_objects("ResourceSlice", "")
            if isinstance(s, ResourceSliceObject)
        ]
        classes = [
            c.device()
            for c in self.store.list_objects("DeviceClass", "")
            if isinstance(c, DeviceClassObject)
        ]
        published = [s for s in slices if isinstance(s, ResourceSlice)]
        refused_before = dict(self._slice_index.refused)
        inventory = self._slice_index.update(published)
        for name, reason in self._slice_index.refused.items():
            if refused_before.get(name) != reason:
                log.warning("ResourceSlice %s left out: %s", name, reason)
        self._gpu_devices = any(
            d.driver == DRIVER and d.short.get("type") == "gpu" for d in inventory.by_id.values()
        )
        kept = [c for c in classes if isinstance(c, DeviceClass)]
        if not any(c.metadata.name == DEFAULT_CLASS for c in kept):
            kept.append(default_class())  # the short form's class, built in
        return Devices(published, kept, allocated, inventory)

    def _claims_problem(self, job: Job) -> str | None:
        """Why the job's claims cannot be allocated now, before the scheduler is asked."""
        for task in job.spec.tasks:
            for ref in task.resources.claims:
                template = ref.resource_claim_template_name
                if template is not None:
                    found = self.store.find("ResourceClaimTemplate", job.tenant, template)
                    if found is None:
                        return (
                            f"task {task.name}: claim template {template} does not exist in "
                            f"tenant {job.tenant}"
                        )
                    continue
                name = ref.resource_claim_name
                stored = self.store.find("ResourceClaim", job.tenant, name or "")
                if not isinstance(stored, ResourceClaimObject):
                    return f"task {task.name}: claim {name} does not exist in tenant {job.tenant}"
        return None

    def _allocations(self, job: Job, record: TaskRecord) -> list[AllocationResult]:
        """The stored allocations of the claims a task uses (its own, shared ones, and its
        compiled ``gpu:`` claim): what the backend pins it to."""
        spec = task_spec(job, record.group_name)
        names = [_claim_name(job, record.name, ref) for ref in spec.resources.claims]
        if compiles_to_claim(spec.resources.gpu):
            names.append(short_form_claim_name(job, record.name))
        out = []
        for name in names:
            stored = self.store.find("ResourceClaim", job.tenant, name)
            status = stored.status if isinstance(stored, ResourceClaimObject) else None
            if status is not None and status.allocation:
                out.append(AllocationResult.model_validate(status.allocation))
        return out

    def _claims_wait(self, job: Job, message: str) -> None:
        """An event on each named claim of the job saying why it waits (when it changes)."""
        for task in job.spec.tasks:
            for ref in task.resources.claims:
                if ref.resource_claim_name is None:
                    continue
                key = (job.tenant, ref.resource_claim_name)
                if self._claim_waiting.get(key) == message:
                    continue
                stored = self.store.find("ResourceClaim", job.tenant, ref.resource_claim_name)
                if stored is not None:
                    self._claim_waiting[key] = message
                    self.store.record_event(
                        stored, "Unschedulable", f"job {job.name}: {message}", warning=True
                    )

    def _claims_allocated(
        self, job: Job, task: str, allocations: Mapping[str, AllocationResult]
    ) -> None:
        """Persist status.allocation and reservedFor of the claims a placed task uses; a claim
        from a template is stored first."""
        if not allocations:
            return
        spec = task_spec(job, task.rsplit("-", 1)[0])
        refs = {_claim_name(job, task, ref): ref for ref in spec.resources.claims}
        compiled = short_form_claim_name(job, task)
        for name, result in allocations.items():
            ref = refs.get(name)
            stored = self.store.find("ResourceClaim", job.tenant, name)
            if name == compiled and spec.resources.gpu is not None:
                if stored is None:
                    made = wrap_device(
                        short_form_claim(job, task, spec.resources.gpu), tenant=job.tenant
                    )
                    meta = made.metadata.model_copy(
                        update={
                            "annotations": {SHORT_FORM_ANNOTATION: "resources.gpu"},
                            "labels": {"aipaas.dev/job": job.name},
                        }
                    )
                    stored = self.store.create(made.model_copy(update={"metadata": meta}))
                self._compiled_stored.add((job.tenant, name))
            elif ref is None:
                continue
            elif stored is None:
                from_template = self._claim_for(job, task, ref)
                if from_template is None:
                    continue
                stored = wrap_device(from_template, tenant=job.tenant)
                meta = stored.metadata.model_copy(
                    update={
                        "annotations": {
                            GENERATED_ANNOTATION: f"{ref.resource_claim_template_name}",
                        },
                        "labels": {"aipaas.dev/job": job.name},
                    }
                )
                stored = self.store.create(stored.model_copy(update={"metadata": meta}))
            consumer = {"resource": "tasks", "name": f"{job.name}/{task}", "uid": job.metadata.uid}
            before = stored.status if isinstance(stored, ResourceClaimObject) else None
            if before is not None and before.allocation:
                # A shared claim: allocated once; each consumer is added to reservedFor.
                users = [r for r in before.reserved_for if r != consumer] + [consumer]
                self.store.update_status(
                    stored, ClaimStatus(allocation=before.allocation, reserved_for=users)
                )
                self.store.record_event(
                    stored,
                    "Reserved",
                    f"shared with job {job.name} task {task} ({len(users)} tasks use it)",
                )
                continue
            status = ClaimStatus(
                allocation=result.model_dump(mode="json", by_alias=True, exclude_none=True),
                reserved_for=[consumer],
            )
            self.store.update_status(stored, status)
            self._claim_waiting.pop((job.tenant, name), None)
            devices = ", ".join(r.device for r in result.devices.results)
            self.store.record_event(
                stored, "Allocated", f"devices {devices} for job {job.name} task {task}"
            )

    # helpers ----------------------------------------------------------------------------------

    def _start(self, item: JobWork, record: TaskRecord) -> None:
        backends = {n.name: n.backend for n in self.nodes}
        devices = claim_devices(self._allocations(item.job, record))
        request = make_request(item.job, record, item.records, backends, devices)
        try:
            self.backend.start(request)
        except (OSError, ValueError) as err:
            log.warning("starting %s of job %s failed: %s", record.name, item.job.name, err)
            item.set(record.with_(phase=TaskPhase.LOST.value, message=f"start failed: {err}"))

    def _save(self, item: JobWork) -> None:
        if not item.changed:
            return
        with self.store.transaction() as tx:
            for record in item.records:
                if record.name in item.changed:
                    self.tasks.save(record, conn=tx)
        item.changed.clear()

    # 5. write back ----------------------------------------------------------------------------

    def _write_back(self, work: list[JobWork]) -> None:
        """Task records, job status and events of the cycle, in one transaction."""
        statuses: list[tuple[Job, JobStatus]] = []
        events: list[tuple[Job, str, str, bool]] = []
        deleted: list[Job] = []
        for item in work:
            status = job_status(item, isoformat(self.clock.now()))
            if (item.job.status.model_dump(mode="json") if item.job.status else None) != (
                status.model_dump(mode="json")
            ):
                statuses.append((item.job, status))
                status_events(item, status)
            events.extend((item.job, *event) for event in item.events)
            if DELETE_ANNOTATION in item.job.metadata.annotations and status.phase.finished:
                deleted.append(item.job)
        with self.store.transaction() as tx:
            changed = [r for item in work for r in item.records if r.name in item.changed]
            self.tasks.save_many(changed, conn=tx)
            for item in work:
                item.changed.clear()
            self.store.write_statuses(statuses, conn=tx)
            self.store.record_events(events, conn=tx)
            for job in deleted:
                self.tasks.delete_job(job.metadata.uid or "", conn=tx)
                self.store.delete("Job", job.tenant, job.name, conn=tx)

    def _publish_metrics(self, work: list[JobWork], placer: Placer) -> None:
        counts = dict.fromkeys((p.value for p in JobPhase), 0)
        for phase, count in self.store.count_by_phase("Job").items():
            counts[phase or JobPhase.PENDING.value] += count
        for phase, count in counts.items():
            self.metrics.jobs.labels(phase=phase).set(count)
        self.metrics.pending.clear()
        for item in work:
            if item.job.status is None or item.job.status.phase is JobPhase.PENDING:
                self.metrics.pending.labels(tenant=item.job.tenant, queue=item.job.spec.queue).inc()
        self.metrics.gpus_total.set(placer.gpus_total)
        self.metrics.gpus_allocated.set(placer.gpus_allocated)


def _claim_name(job: Job, task: str, ref: TaskClaim) -> str:
    """The stored name of a task replica's claim: the named one, or ``JOB-TASK-NAME``."""
    if ref.resource_claim_name is not None:
        return ref.resource_claim_name
    return f"{job.name}-{task}-{ref.name}"[:253]
