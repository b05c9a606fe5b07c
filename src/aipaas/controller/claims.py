"""The controller's side of DRA claims: the stored ResourceClaims of jobs' tasks, kept across
cycles.

Each cycle ``ClaimBook.devices`` frees the claims whose tasks ended and gathers what the device
allocator sees; admission then asks ``problem`` (claims that do not exist, extended resources no
DeviceClass serves), builds each task's ``Pod`` with its claims (``pod``: its own, one per
extended resource, the one ``gpu:`` compiles to), and after placement persists
status.allocation and reservedFor (``record_allocated``) or an event saying why the job waits
(``record_wait``); starting a task asks ``allocations`` for the devices the backend pins it to.

Who calls it: controller/cycle.py and controller/admission.py. It reads and writes the store;
it never calls a backend.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aipaas.api.devices import (
    AllocationResult,
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceSlice,
    parse_device_object,
)
from aipaas.api.dra import (
    ClaimStatus,
    DeviceClassObject,
    DeviceTaintRuleObject,
    ResourceClaimObject,
    ResourceClaimTemplateObject,
    ResourceSliceObject,
    wrap_device,
)
from aipaas.api.job import Job
from aipaas.api.meta import Object
from aipaas.api.resources import TaskClaim, TaskResources
from aipaas.clock import isoformat
from aipaas.controller.launch import task_spec, wants_simulated
from aipaas.controller.placement import Devices, Pod, SliceIndex
from aipaas.controller.task_devices import (
    SHORT_FORM_ANNOTATION,
    UNSERVED,
    UNSERVED_CLASS,
    compiles_to_claim,
    extended_claim,
    extended_claim_name,
    short_form_claim,
    short_form_claim_name,
)
from aipaas.controller.work import FINISHED_TASK, JobWork
from aipaas.devices.binding import (
    BindingWait,
    binding_wait,
    device_statuses,
    merge_conditions,
)
from aipaas.devices.device_eviction import no_execute_reason, parse_time
from aipaas.devices.extended import GPU_RESOURCE, serving_class, unserved_message
from aipaas.devices.shortform import DEFAULT_CLASS, default_class
from aipaas.devices.topology_files import DRIVER
from aipaas.scheduler.batch.from_api import gpu_share, node_constraints
from aipaas.store import Connection, Store, TaskRecord

log = logging.getLogger("aipaas.controller")

GENERATED_ANNOTATION = "aipaas.dev/from-template"  # a claim made for one task replica


@dataclass(frozen=True)
class NoExecuteHit:
    """An allocated claim a device NoExecute taint ends, with the tasks that use it."""

    tenant: str
    claim: str
    users: tuple[dict[str, Any], ...]
    reason: str


#: placed replicas' pods kept at most (``ClaimBook.pod``): past it, all are built again
_PODS_KEPT = 200_000


class ClaimBook:
    """Stored claims and what must survive between cycles: the indexed slices, the last
    "waiting" message per claim (so an event is written only when it changes), whether GPU
    devices are published, and which compiled ``gpu:`` claims are stored."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.slice_index = SliceIndex()
        self._waiting: dict[tuple[str, str], str] = {}
        self._gpu_devices = False  # the inventory publishes GPU devices: gpu: compiles
        #: the stored DeviceClass that serves nvidia.com/gpu (extendedResourceName), if any
        self._gpu_class: str | None = None
        #: the stored DeviceClasses, and which serves each extended resource asked (per cycle)
        self._classes: list[DeviceClass] = []
        self._serving: dict[str, str | None] = {}
        self._compiled_stored: set[tuple[str, str]] = set()  # (tenant, name) of such claims
        #: (tenant, name) -> status.allocation of every allocated claim, as ``devices`` read it
        self._allocated: dict[tuple[str, str], AllocationResult] = {}
        #: (tenant, name) -> the stored claim as ``devices`` listed it, less those written
        #: since: ``pod`` reads a task's claims here, not one store query per claim and cycle
        self._stored: dict[tuple[str, str], ResourceClaimObject] = {}
        #: allocated claims whose devices carry a NoExecute taint they do not tolerate: their
        #: tasks are evicted (controller/device_taint_eviction.py)
        self.no_execute: list[NoExecuteHit] = []
        #: stored DeviceTaintRules by (name, resourceVersion), with their taint's timeAdded
        self._rules: dict[tuple[str, str | None], DeviceTaintRule] = {}
        #: the device conditions last copied into claims (``observe``)
        self._observed: object = None
        #: the transaction ``record_allocated`` writes in (``writing``); None: its own
        self._tx: Connection | None = None
        #: inside ``writing``: (tenant, name) -> each claim as the transaction found it and
        #: its last status, written at its end with the events; and the claim as set since
        self._statuses: dict[tuple[str, str], tuple[Object, ClaimStatus]] = {}
        self._events: list[tuple[Object, str, str, bool]] = []
        self._set_now: dict[tuple[str, str], Object] = {}
        #: (job uid, task) -> what a placed replica's pod was built of, and the pod (``pod``)
        self._pods: dict[tuple[str, str], tuple[tuple[object, ...], Pod]] = {}
        #: (job uid, job version, task, group) -> the stored names of its claims (``_names``)
        self._claim_names: dict[tuple[str, str, str, str], tuple[str, ...]] = {}

    @contextmanager
    def writing(self, tx: Connection) -> Iterator[None]:
        """``record_allocated`` writes in ``tx``: the starts' fenced transaction, so that a
        claim's allocation is durable with its task's record or not at all, in one commit for
        a cycle's starts rather than three per task. If the transaction fails, what this cycle
        knows of the stored claims is forgotten (the next cycle reads them again)."""
        self._tx = tx
        self._statuses, self._events, self._set_now = {}, [], {}
        try:
            yield
            self.store.write_statuses(list(self._statuses.values()), conn=tx)
            self.store.record_events(self._events, conn=tx)
        except BaseException:
            self._stored = {}
            raise
        finally:
            self._tx = None
            self._statuses, self._events, self._set_now = {}, [], {}

    def devices(self, work: list[JobWork], elsewhere: Sequence[ResourceClaim] = ()) -> Devices:
        """Slices, classes and allocated claims; claims whose tasks ended are freed first (a
        claim made from a template is deleted, as Kubernetes deletes a pod's claim).
        ``elsewhere``: allocations others made on the backend's devices (``Inventory
        .held_elsewhere``): held in the ledger as aipaas's own are."""
        active = {
            (item.job.metadata.uid or "", f"{item.job.name}/{record.name}")
            for item in work
            for record in item.records
            if record.node is not None and (record.phase not in FINISHED_TASK or record.stopping)
        }
        allocated = []
        self._compiled_stored = set()
        self._allocated = {}
        self._stored = {}
        users_of: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for obj in self.store.list_objects("ResourceClaim", None):
            if not isinstance(obj, ResourceClaimObject):
                continue
            self._stored[(obj.tenant, obj.name)] = obj
            if obj.status is None:
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
                self._stored.pop((obj.tenant, obj.name), None)
                if GENERATED_ANNOTATION in annotations or SHORT_FORM_ANNOTATION in annotations:
                    self.store.delete("ResourceClaim", obj.tenant, obj.name)
                    continue
                self.store.update_status(obj, None)
                self.store.record_event(obj, "Deallocated", "its tasks ended; devices freed")
                continue
            if len(users) != len(obj.status.reserved_for):
                # Consumers that ended leave reservedFor; the others keep the devices.
                obj = self.store.update_status(
                    obj,
                    ClaimStatus(
                        allocation=obj.status.allocation,
                        reserved_for=users,
                        devices=obj.status.devices,
                    ),
                )
                assert isinstance(obj, ResourceClaimObject)
                self._stored[(obj.tenant, obj.name)] = obj
            if SHORT_FORM_ANNOTATION in obj.metadata.annotations:
                self._compiled_stored.add((obj.tenant, obj.name))
            claim = obj.claim()
            if claim.status is not None and claim.status.allocation is not None:
                self._allocated[(obj.tenant, obj.name)] = claim.status.allocation
                users_of[(obj.tenant, obj.name)] = users
            allocated.append(claim)
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
        rules = [
            self._dated(r)
            for r in self.store.list_objects("DeviceTaintRule", "")
            if isinstance(r, DeviceTaintRuleObject)
        ]
        self.slice_index.set_taint_rules([r for r in rules if r is not None])
        refused_before = dict(self.slice_index.refused)
        inventory = self.slice_index.update(published)
        for name, reason in self.slice_index.refused.items():
            if refused_before.get(name) != reason:
                log.warning("ResourceSlice %s left out: %s", name, reason)
        self._gpu_devices = any(
            d.driver == DRIVER and d.short.get("type") == "gpu" for d in inventory.by_id.values()
        )
        self.no_execute = []  # devices/device_eviction.py
        for (tenant, claim_name_), allocation in self._allocated.items():
            ended = no_execute_reason(inventory, claim_name_, allocation, self.store.clock.now())
            if ended is not None:
                consumers = tuple(users_of.get((tenant, claim_name_), ()))
                self.no_execute.append(NoExecuteHit(tenant, claim_name_, consumers, ended))
        kept = [c for c in classes if isinstance(c, DeviceClass)]
        # KEP-5004: a class whose extendedResourceName is nvidia.com/gpu serves ``gpu:``
        self._gpu_class = serving_class(kept, GPU_RESOURCE)
        self._classes, self._serving = list(kept), {}
        if not any(c.metadata.name == DEFAULT_CLASS for c in kept):
            kept.append(default_class())  # the short form's class, built in
        if not any(c.metadata.name == UNSERVED_CLASS for c in kept):
            kept.append(UNSERVED)  # its claims' own selector says which resource no class serves
        return Devices(published, kept, [*allocated, *elsewhere], inventory)

    @property
    def gpu_devices(self) -> bool:
        """The inventory publishes GPU devices, or a DeviceClass serves nvidia.com/gpu:
        ``resources.gpu`` compiles to a claim."""
        return self._gpu_devices or self._gpu_class is not None

    def pod(self, job: Job, record: TaskRecord) -> Pod:
        """What the scheduler is asked to place for one task replica, its claims included.

        A placed replica's pod is kept while its job, node and stored claims are the same
        (every placed task is asked for twice each placing cycle: thousands of pods, most of
        them unchanged since the last)."""
        if record.node is None:
            return self._pod(job, record)
        key = self._pod_key(job, record)
        if key is None:
            return self._pod(job, record)
        known = self._pods.get((job.metadata.uid or "", record.name))
        if known is not None and known[0] == key:
            return known[1]
        made = self._pod(job, record)
        if len(self._pods) >= _PODS_KEPT:
            self._pods.clear()
        self._pods[(job.metadata.uid or "", record.name)] = (key, made)
        return made

    def _names(self, job: Job, record: TaskRecord) -> tuple[str, ...]:
        """``task_claim_names``, kept while the job's version is the same (every placed task
        asks several times each placing cycle: the names are made of its job's spec)."""
        uid, version = job.metadata.uid, job.metadata.resource_version
        if not uid or not version:  # a job not stored (a simulation's): nothing to key by
            return tuple(task_claim_names(job, record))
        key = (uid, version, record.name, record.group_name)
        names = self._claim_names.get(key)
        if names is None:
            if len(self._claim_names) >= _PODS_KEPT:
                self._claim_names.clear()
            names = self._claim_names[key] = tuple(task_claim_names(job, record))
        return names

    def _pod_key(self, job: Job, record: TaskRecord) -> tuple[object, ...] | None:
        """What a placed replica's pod depends on, when all its claims are stored (None: it
        reads a template or a class, and is built each time)."""
        versions = []
        for name in self._names(job, record):
            stored = self._stored.get((job.tenant, name))
            if stored is None:
                return None
            compiled = (job.tenant, name) in self._compiled_stored
            versions.append((name, stored.metadata.resource_version, compiled))
        return (
            job.metadata.resource_version,
            record.node,
            self._gpu_devices,
            self._gpu_class,
            tuple(versions),
        )

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
        for resource, count in spec.resources.extended_asked().items():
            claims.append(self._extended(job, record, resource, count))
        compiled = self._short_form(job, record)
        if compiled is not None:
            claims.append(compiled)  # last: the waiting hint names it (batch_cycle.py)
        return Pod(
            f"{job.tenant}/{job.name}/{record.name}",
            spec.resources.amounts(),
            models,
            tuple(claims),
            gpu_claim=compiled is not None,
            on_request=wants_simulated(job),
            constraints=node_constraints(job.spec),
            share=gpu_share(spec.resources.gpu),
        )

    def problem(self, job: Job) -> str | None:
        """Why the job's claims cannot be allocated now, before the scheduler is asked."""
        for task in job.spec.tasks:
            for resource in task.resources.extended_asked():
                # Not an error: a class may be created later (KEP-5004 reads classes as the
                # pod is scheduled), and the job is placed once one serves the name.
                if self.serving(resource) is None:
                    return f"task {task.name}: {unserved_message(resource)}"
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
                stored = self._find(job.tenant, name or "")  # listed this cycle, or read
                if not isinstance(stored, ResourceClaimObject):
                    return f"task {task.name}: claim {name} does not exist in tenant {job.tenant}"
        return None

    def serving(self, resource: str) -> str | None:
        """The stored DeviceClass that serves extended resource ``resource`` this cycle."""
        if resource not in self._serving:
            self._serving[resource] = serving_class(self._classes, resource)
        return self._serving[resource]

    def _find(self, tenant: str, name: str) -> Object | None:
        """A stored claim as this cycle knows it: listed by ``devices`` or written since by
        this controller, else read once from the store (a start is asked for each placed task
        every cycle until its backend confirms it: three reads a task and cycle otherwise)."""
        found = self._stored.get((tenant, name))
        if found is not None:
            return found
        read = self.store.find("ResourceClaim", tenant, name)
        if isinstance(read, ResourceClaimObject):
            self._stored[(tenant, name)] = read
        return read

    def _wrote(self, written: Object) -> None:
        """What this controller just wrote of a claim is what the cycle knows of it now."""
        if isinstance(written, ResourceClaimObject):
            self._stored[(written.tenant, written.name)] = written

    def allocations(self, job: Job, record: TaskRecord) -> list[AllocationResult]:
        """The stored allocations of the claims a task uses (its own, shared ones, and its
        compiled ``gpu:`` claim): what the backend pins it to."""
        out = []
        for name in self._names(job, record):
            stored = self._find(job.tenant, name)
            status = stored.status if isinstance(stored, ResourceClaimObject) else None
            if status is not None and status.allocation:
                out.append(AllocationResult.model_validate(status.allocation))
        return out

    def observe(
        self, conditions: Mapping[tuple[str, str, str], Sequence[Mapping[str, Any]]]
    ) -> None:
        """Copy the conditions device drivers set (as the backend reports them) into the
        status.devices of the allocated claims that hold those devices; read again only when
        the report changed."""
        if not conditions or conditions is self._observed:
            return
        self._observed = conditions
        for obj in self.store.list_objects("ResourceClaim", None):
            if not isinstance(obj, ResourceClaimObject) or obj.status is None:
                continue
            if not obj.status.allocation or not obj.status.devices:
                continue
            merged = merge_conditions(obj.status.devices, conditions)
            if merged is not None:
                self._stored.pop((obj.tenant, obj.name), None)
                self.store.update_status(
                    obj,
                    ClaimStatus(
                        allocation=obj.status.allocation,
                        reserved_for=obj.status.reserved_for,
                        devices=merged,
                    ),
                )

    def _dated(self, stored: DeviceTaintRuleObject) -> DeviceTaintRule | None:
        """A stored rule whose taint has its ``timeAdded`` (the rule's creation when the rule
        does not say, as the API server sets it), kept per version so that an unchanged rule
        is the same model every cycle (the inventory re-taints only on a change)."""
        key = (stored.name, stored.metadata.resource_version)
        found = self._rules.get(key)
        if found is None:
            rule = stored.device()
            if not isinstance(rule, DeviceTaintRule):
                return None
            taint = rule.spec.taint
            if taint.time_added is None and stored.metadata.creation_timestamp:
                taint = taint.model_copy(update={"time_added": stored.metadata.creation_timestamp})
                rule = rule.model_copy(
                    update={"spec": rule.spec.model_copy(update={"taint": taint})}
                )
            found = self._rules[key] = rule
            if len(self._rules) > 4096:  # old versions of rules long replaced
                self._rules = {key: found}
        return found

    def binding_wait(self, job: Job, record: TaskRecord) -> BindingWait | None:
        """Why a placed task may not start yet, or why its devices' binding failed: a device
        of its claims published with binding conditions that are not all True in the claim's
        status.devices (devices/binding.py); None: it may start."""
        now = self.store.clock.now()
        for name in self._names(job, record):
            stored = self._find(job.tenant, name)
            status = stored.status if isinstance(stored, ResourceClaimObject) else None
            if status is None or not status.allocation:
                continue
            allocation = AllocationResult.model_validate(status.allocation)
            if not any(
                r.binding_conditions or r.binding_failure_conditions
                for r in allocation.devices.results
            ):
                continue
            since = parse_time(allocation.allocation_timestamp) or now
            found = binding_wait(name, allocation, status.devices, (now - since).total_seconds())
            if found is not None:
                return found
        return None

    def held_allocations(self, job: Job, record: TaskRecord) -> dict[str, AllocationResult]:
        """status.allocation by claim name of the claims a placed task holds, as this cycle's
        ``devices`` read them (no store reads): what the Placer gives the task to own, so that
        evicting it frees its devices (controller/placement.py ``hold_placement``)."""
        out = {}
        for name in self._names(job, record):
            allocation = self._allocated.get((job.tenant, name))
            if allocation is not None:
                out[name] = allocation
        return out

    def allocated_claims(self, job: Job, record: TaskRecord) -> tuple[dict[str, Any], ...]:
        """The task's allocated claims as resource.k8s.io/v1 documents (name, spec and
        status.allocation): what a backend with DRA of its own (Kubernetes) writes there."""
        out = []
        for name in self._names(job, record):
            stored = self._find(job.tenant, name)
            if (
                isinstance(stored, ResourceClaimObject)
                and stored.status
                and stored.status.allocation
            ):
                out.append(
                    {
                        "metadata": {"name": name},
                        "spec": stored.spec,
                        "status": {"allocation": stored.status.allocation},
                    }
                )
        return tuple(out)

    def record_wait(self, job: Job, message: str) -> None:
        """An event on each named claim of the job saying why it waits (when it changes)."""
        for task in job.spec.tasks:
            for ref in task.resources.claims:
                if ref.resource_claim_name is None:
                    continue
                key = (job.tenant, ref.resource_claim_name)
                if self._waiting.get(key) == message:
                    continue
                stored = self.store.find("ResourceClaim", job.tenant, ref.resource_claim_name)
                if stored is not None:
                    self._waiting[key] = message
                    self.store.record_event(
                        stored, "Unschedulable", f"job {job.name}: {message}", warning=True
                    )

    def record_allocated(
        self, job: Job, task: str, allocations: Mapping[str, AllocationResult]
    ) -> None:
        """Persist status.allocation and reservedFor of the claims a placed task uses; a claim
        from a template is stored first. Inside ``writing(tx)``, in that transaction."""
        if not allocations:
            return
        spec = task_spec(job, task.rsplit("-", 1)[0])
        refs = {claim_name(job, task, ref): ref for ref in spec.resources.claims}
        compiled = short_form_claim_name(job, task)
        extended = _extended_names(job, task, spec.resources)
        for name, result in allocations.items():
            ref = refs.get(name)
            self._stored.pop((job.tenant, name), None)  # written below
            # a claim this transaction set already (shared by tasks started together)
            stored = self._set_now.get((job.tenant, name)) or self.store.find(
                "ResourceClaim", job.tenant, name, conn=self._tx
            )
            if name in extended:
                resource, count = extended[name]
                if stored is None:
                    made = extended_claim(job, task, resource, count, self.serving(resource))
                    stored = self._store_compiled(job, made, f"resources[{resource}]")
                self._compiled_stored.add((job.tenant, name))
            elif name == compiled and spec.resources.gpu is not None:
                if stored is None:
                    made = short_form_claim(
                        job, task, spec.resources.gpu, self._gpu_class or DEFAULT_CLASS
                    )
                    stored = self._store_compiled(job, made, "resources.gpu")
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
                stored = self.store.create(
                    stored.model_copy(update={"metadata": meta}), conn=self._tx
                )
            consumer = {"resource": "tasks", "name": f"{job.name}/{task}", "uid": job.metadata.uid}
            before = stored.status if isinstance(stored, ResourceClaimObject) else None
            if before is not None and before.allocation:
                # A shared claim: allocated once; each consumer is added to reservedFor.
                users = [r for r in before.reserved_for if r != consumer] + [consumer]
                stored = self._set_status(
                    stored,
                    ClaimStatus(
                        allocation=before.allocation, reserved_for=users, devices=before.devices
                    ),
                )
                self._event(
                    stored,
                    "Reserved",
                    f"shared with job {job.name} task {task} ({len(users)} tasks use it)",
                )
                continue
            now = isoformat(self.store.clock.now())
            stamped = result.model_copy(update={"allocation_timestamp": now})
            status = ClaimStatus(
                allocation=stamped.model_dump(mode="json", by_alias=True, exclude_none=True),
                reserved_for=[consumer],
                devices=device_statuses(result, now),
            )
            stored = self._set_status(stored, status)
            self._waiting.pop((job.tenant, name), None)
            devices = ", ".join(r.device for r in result.devices.results)
            self._event(stored, "Allocated", f"devices {devices} for job {job.name} task {task}")

    def _set_status(self, stored: Object, status: ClaimStatus) -> Object:
        """A claim's new status: written now, or inside ``writing`` with the others at its end
        (one statement); what the cycle knows of the claim from now on either way."""
        if self._tx is None:
            written = self.store.update_status(stored, status)
        else:
            key = (stored.tenant, stored.name)
            found = self._statuses[key][0] if key in self._statuses else stored
            self._statuses[key] = (found, status)  # as the transaction found it, set last
            version = str(int(found.metadata.resource_version or 0) + 1)
            meta = found.metadata.model_copy(update={"resource_version": version})
            written = found.model_copy(update={"metadata": meta, "status": status})
            self._set_now[key] = written
        self._wrote(written)
        return written

    def _event(self, stored: Object, reason: str, message: str) -> None:
        if self._tx is None:
            self.store.record_event(stored, reason, message)
        else:
            self._events.append((stored, reason, message, False))

    def _store_compiled(self, job: Job, claim: ResourceClaim, source: str) -> Object:
        """Store a claim compiled from ``source`` (``resources.gpu``, ``resources[NAME]``)
        for one replica: deleted once its task ended (``devices``)."""
        made = wrap_device(claim, tenant=job.tenant)
        meta = made.metadata.model_copy(
            update={
                "annotations": {SHORT_FORM_ANNOTATION: source},
                "labels": {"aipaas.dev/job": job.name},
            }
        )
        return self.store.create(made.model_copy(update={"metadata": meta}), conn=self._tx)

    def _extended(self, job: Job, record: TaskRecord, resource: str, count: int) -> ResourceClaim:
        """The claim of extended resource ``resource: count`` for one replica. A placed
        replica keeps the claim it was given (stored, as a template's claim is, even if its
        class has gone since); a pending one gets ``count`` devices of the class that serves
        the name now."""
        name = extended_claim_name(job, record.name, resource)
        if record.node is not None:
            stored = self._stored.get((job.tenant, name))
            if stored is not None:
                return stored.claim().model_copy(update={"status": None})
        # None: no class serves it (a replica of a job already running, which ``problem`` is
        # not asked about): a claim no device meets, rather than a replica without its devices
        return extended_claim(job, record.name, resource, count, self.serving(resource))

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
        elif not self._gpu_devices and self._gpu_class is None:
            return None
        return short_form_claim(job, record.name, gpu, self._gpu_class or DEFAULT_CLASS)

    def _claim_for(self, job: Job, task: str, ref: TaskClaim) -> ResourceClaim | None:
        """The claim a task replica uses: the named one, or the one its template makes (stored
        once allocated, under ``JOB-TASK-NAME``)."""
        name = claim_name(job, task, ref)
        stored: object = self._stored.get((job.tenant, name))
        if stored is None:
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


def task_claim_names(job: Job, record: TaskRecord) -> list[str]:
    """The stored names of the claims a task replica uses (its compiled ``gpu:`` one last)."""
    spec = task_spec(job, record.group_name)
    names = [claim_name(job, record.name, ref) for ref in spec.resources.claims]
    names.extend(_extended_names(job, record.name, spec.resources))
    if compiles_to_claim(spec.resources.gpu):
        names.append(short_form_claim_name(job, record.name))
    return names


def claim_name(job: Job, task: str, ref: TaskClaim) -> str:
    """The stored name of a task replica's claim: the named one, or ``JOB-TASK-NAME``."""
    if ref.resource_claim_name is not None:
        return ref.resource_claim_name
    return f"{job.name}-{task}-{ref.name}"[:253]


def _extended_names(job: Job, task: str, resources: TaskResources) -> dict[str, tuple[str, int]]:
    """The stored names of a replica's extended resource claims -> (resource, count)."""
    return {
        extended_claim_name(job, task, resource): (resource, count)
        for resource, count in resources.extended_asked().items()
    }
