"""Controller step 0 (an intake): pods that others submitted for aipaas (``schedulerName:
aipaas`` from kubectl, Helm charts, Kubeflow, JobSet) become Jobs that aipaas queues and places
like any.

At the start of each cycle, before the cycle lists its jobs (so that cycle places the jobs
taken; taken at its end, they waited a whole cycle more), the backend's pending foreign pods
(backends/foreign_pods.py) are grouped into gangs by their pod-group label or annotation (a pod
without one is a gang of its own, complete at once). A gang is taken once it is complete: as
many pods as its ``kubernetes.aipaas.dev/group-size`` says, or, without it, the same pods for
``kube_settle_seconds`` (a controller creating them one by one has finished; seen in two
cycles at least).
Its namespace names the tenant (configurable mapping), its pods name the queue (KAI, Volcano,
Kueue conventions; ``kube_default_queue`` otherwise). The store gets one Job for the gang and a
ResourceClaim for each cluster claim its pods use (so the device allocator allocates them); the
pods are then marked as taken. Starting the job's tasks binds those pods, creating none.
Pods that wait (their gang incomplete, their tenant or queue unknown, their job not placed
yet) are told why where the backend can say it (on Kubernetes a FailedScheduling event, which
``kubectl describe pod`` shows), with the job's own reason once it is queued.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from aipaas.api.dra import parse_device_kind
from aipaas.api.job import Job
from aipaas.api.priority import DEFAULT_CLASS, PriorityClass
from aipaas.api.tenancy import Tenant
from aipaas.backends.foreign_pods import ForeignPod, ForeignPods, foreign_pods
from aipaas.controller.extensions import CycleContext, CycleIntake
from aipaas.controller.kube_import_jobs import gang_job, gang_name
from aipaas.errors import InvalidObject
from aipaas.settings import Settings
from aipaas.store import Connection, Store

log = logging.getLogger("aipaas.controller")

GroupKey = tuple[str, str]  # (namespace, group)


class KubeImport:
    name = "kube-import"

    def __init__(
        self,
        default_queue: str,
        settle_seconds: float = 2.0,
        every_seconds: float = 0.0,
        most_per_cycle: int = 512,
        explain_seconds: float = 2.0,
    ) -> None:
        self.default_queue = default_queue
        self.settle_seconds = settle_seconds
        #: at most one read of the cluster's pending pods this often; 0: every cycle (the
        #: Kubernetes backend answers from its informers' memory, asking the server nothing)
        self.every_seconds = every_seconds
        #: gangs taken in one cycle at most: a burst of thousands of pods is taken over several
        #: cycles, which place what was taken between (64 capped the side-by-side benchmark's
        #: single-pod jobs at about 40 a second; 256 took it to 58 on 200 nodes, 1,024 to 51;
        #: on 500 nodes, once per-pod costs fell, 512 gave 50.3 a second and a p99 of 45 s
        #: against 256's 47.9 and 54 s: a cycle also pays for every task placed before it)
        self.most_per_cycle = most_per_cycle
        self._read_at: float | None = None
        #: each group's pods as last seen, and since when they have been those
        self._last: dict[GroupKey, tuple[frozenset[str], float]] = {}
        self._warned: set[tuple[GroupKey, str]] = set()
        #: jobs taken and not yet running: (tenant, job) -> their pods (namespace, name)
        self._waiting: dict[tuple[str, str], list[tuple[str, str]]] = {}
        #: their reasons are read from the store at most this often (a read per waiting job:
        #: thousands of them must not cost thousands of reads a cycle)
        self.explain_seconds = explain_seconds
        self._explained_at: float | None = None
        #: the jobs this cycle stored (not listed by it: their status is the one just written)
        self._taken_now: set[tuple[str, str]] = set()

    def take_in(self, context: CycleContext) -> None:
        source = foreign_pods(context.backend)
        now = context.clock.monotonic()
        if source is None or (
            self._read_at is not None and now - self._read_at < self.every_seconds
        ):
            return
        self._read_at = now
        self._taken_now = set()
        groups: dict[GroupKey, list[ForeignPod]] = defaultdict(list)
        for pod in source.pending_foreign_pods():
            groups[(pod.namespace, pod.group or pod.name)].append(pod)
        last, self._last = self._last, {}
        taken = 0
        ready: list[_Gang] = []
        lookups = _Lookups(context.store)  # tenants, queues, classes: read once a cycle
        for key, pods in groups.items():
            uids = frozenset(p.uid for p in pods)
            before = last.get(key)
            since = before[1] if before is not None and before[0] == uids else now
            self._last[key] = (uids, since)
            size = max(p.group_size for p in pods)
            settled = before is not None and now - since >= self.settle_seconds
            # a pod of no group is a gang of one: nothing more can join it
            alone = all(p.group is None for p in pods)
            complete = len(pods) >= size if size else (alone or settled)
            if complete and not any(p.claims_pending for p in pods):
                if taken >= self.most_per_cycle:
                    continue  # the next cycle's
                taken += 1
                pods.sort(key=lambda p: p.name)
                gang = self._prepare(context, source, key, pods, lookups)
                if gang is not None:
                    ready.append(gang)
            elif size and len(pods) < size:
                self._tell(source, pods, f"gang {key[1]}: {len(pods)} of {size} pods exist")
        self._take(context, source, ready)
        self._explain_jobs(context, source)

    @staticmethod
    def _tell(source: ForeignPods, pods: Sequence[ForeignPod], note: str) -> None:
        record = getattr(source, "record_waiting", None)
        if record is not None:
            record([(p.namespace, p.name) for p in pods], note)

    def _explain_jobs(self, context: CycleContext, source: ForeignPods) -> None:
        """Each taken job that is not running yet: its reason on its pods (every
        ``explain_seconds``)."""
        record = getattr(source, "record_waiting", None)
        now = context.clock.monotonic()
        if record is None or (
            self._explained_at is not None and now - self._explained_at < self.explain_seconds
        ):
            return
        self._explained_at = now
        for key, pods in list(self._waiting.items()):
            if key in context.placed or key in self._taken_now:
                continue  # its pods are on their way to a node, or it was stored just now
            job = context.jobs.get(key) or context.store.find("Job", *key)
            status = getattr(job, "status", None)
            if job is None or status is None or status.phase.value != "Pending":
                del self._waiting[key]
                continue
            why = status.message or status.reason
            if why and why != "Submitted":
                record(pods, f"aipaas: {why}")

    def _warn(
        self, key: GroupKey, message: str, source: ForeignPods, pods: Sequence[ForeignPod]
    ) -> None:
        if (key, message) not in self._warned:
            self._warned.add((key, message))
            log.warning("pods of group %s/%s wait: %s", key[0], key[1], message)
        self._tell(source, pods, f"aipaas: {message}")

    def _prepare(
        self,
        context: CycleContext,
        source: ForeignPods,
        key: GroupKey,
        pods: Sequence[ForeignPod],
        lookups: _Lookups,
    ) -> _Gang | None:
        """The job a complete gang becomes, or None (its pods told why) when it cannot be
        one: its namespace maps to no tenant, its queue does not exist, its pods are no job."""
        namespace, group = key
        tenant_name = source.tenant_of(namespace)
        tenant = lookups.tenant(tenant_name) if tenant_name else None
        if tenant_name is None or not isinstance(tenant, Tenant):
            why = f"namespace {namespace} maps to tenant {tenant_name}, which is unknown"
            self._warn(key, why, source, pods)
            return None
        queue = next((p.queue for p in pods if p.queue), None) or self.default_queue
        if not lookups.has_queue(tenant_name, queue):
            self._warn(key, f"tenant {tenant_name} has no queue {queue}", source, pods)
            return None
        classes = lookups.classes()
        name = gang_name(group, pods)
        default_class = tenant.spec.default_priority_class or DEFAULT_CLASS
        try:
            job = gang_job(tenant_name, name, queue, pods, classes, default_class)
        except (ValidationError, InvalidObject) as err:
            self._warn(key, f"they cannot be a job: {err}", source, pods)
            return None
        claims = sorted({c.claim for p in pods for c in p.claims})
        return _Gang(key, tenant_name, job, pods, source.foreign_claims(namespace, claims))

    def _take(self, context: CycleContext, source: ForeignPods, gangs: Sequence[_Gang]) -> None:
        """The gangs' jobs and claims stored in one transaction (one commit for a burst of
        pods, not one per pod), then their pods marked as taken."""
        if not gangs:
            return
        store = context.store
        with context.transaction() as tx:
            # what is stored already, in one query each cycle rather than one per gang
            keys = [("Job", g.tenant, g.job.metadata.name or "") for g in gangs]
            keys += [
                ("ResourceClaim", g.tenant, str(c["metadata"]["name"]))
                for g in gangs
                for c in g.claims
            ]
            stored: set[tuple[str, str, str]] = set(store.find_each(keys, conn=tx))
            for gang in gangs:
                name = gang.job.metadata.name or ""
                if ("Job", gang.tenant, name) in stored:
                    continue  # stored by an import before a crash: the pods' mark was lost
                stored.add(("Job", gang.tenant, name))
                mirror_claims(store, gang.tenant, gang.claims, tx, stored)
                created = store.create(gang.job, conn=tx)
                namespace, group = gang.key
                what = f"{len(gang.pods)} pods of namespace {namespace} (group {group})"
                store.record_event(created, "Imported", what, conn=tx)
        for gang in gangs:
            name = gang.job.metadata.name or ""
            source.mark_imported(gang.pods, name)
            self._taken_now.add((gang.tenant, name))
            self._waiting[(gang.tenant, name)] = [(p.namespace, p.name) for p in gang.pods]


class _Lookups:
    """The store's tenants, queues and priority classes, each read once in a cycle however
    many gangs the cycle takes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._tenants: dict[str, object] = {}
        self._queues: dict[tuple[str, str], bool] = {}
        self._classes: dict[str, PriorityClass] | None = None

    def tenant(self, name: str) -> object:
        if name not in self._tenants:
            self._tenants[name] = self.store.find("Tenant", "", name)
        return self._tenants[name]

    def has_queue(self, tenant: str, queue: str) -> bool:
        if (tenant, queue) not in self._queues:
            found = self.store.find("Queue", tenant, queue) is not None
            self._queues[(tenant, queue)] = found
        return self._queues[(tenant, queue)]

    def classes(self) -> dict[str, PriorityClass]:
        if self._classes is None:
            self._classes = {
                c.name: c
                for c in self.store.list_objects("PriorityClass", "")
                if isinstance(c, PriorityClass)
            }
        return self._classes


@dataclass(frozen=True)
class _Gang:
    """A complete gang of others' pods and the job it becomes."""

    key: GroupKey
    tenant: str
    job: Job
    pods: Sequence[ForeignPod]
    claims: Sequence[Mapping[str, Any]]


def mirror_claims(
    store: Store,
    tenant: str,
    documents: Sequence[Mapping[str, Any]],
    tx: Connection,
    stored: set[tuple[str, str, str]],
) -> None:
    """The cluster's claims the pods use, stored in the tenant (spec only: the allocation is
    aipaas's to make) unless a claim of that name is stored already (``stored``: the keys
    stored, read once for the transaction; what this stores is added, so a claim two gangs
    share is stored by the first)."""
    for document in documents:
        name = document["metadata"]["name"]
        if ("ResourceClaim", tenant, name) in stored:
            continue
        stored.add(("ResourceClaim", tenant, name))
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": tenant},
            "spec": document["spec"],
        }
        store.create(parse_device_kind(body), conn=tx)


def kube_import_extension(settings: Settings) -> CycleIntake | None:
    """Runs where the backend has foreign pods (it checks each cycle, at no cost otherwise)."""
    if not settings.kube_import:
        return None
    return KubeImport(settings.kube_default_queue, settings.kube_settle_seconds)
