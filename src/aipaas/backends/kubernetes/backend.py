"""The Kubernetes backend: a task is a Pod that aipaas places, its claims allocated by aipaas.

The cluster is read through informers (informer.py: Nodes, Pods, ResourceSlices and
ResourceClaims, each listed once and then watched), never listed per cycle; what the backend
writes is put in those caches at once.
Start (idempotent by request id: the pod's name is derived from it, so a second start finds
the first one's pod and finishes what it left undone) runs in a pool of threads
(``start_workers``): ``start`` returns at once, a start already under way is not begun twice,
and until its pod exists the task's status is "unknown", which makes the controller ask for
the start again (a crash's lost start is redone the same way). A stop waits for the task's
start to finish first, so no pod is made after its task was stopped. The steps:
  1. create the task's ResourceClaims that do not exist (the spec aipaas stored);
  2. create the Pod with ``schedulerName`` aipaas and the node it chose in an annotation;
  3. for each claim, as the kube-scheduler's DRA plugin does in PreBind: add the finalizer,
     then write ``status.allocation`` and ``reservedFor`` the pod (one PUT of the status);
  4. POST the pods/binding to the node, and a ``Scheduled`` event (events.py).
Status is read from the pods carrying aipaas's label: level-triggered and crash-safe, a
restarted server adopts its pods by label and creates no duplicates; a pod left unbound by a
crash between 2 and 4 is bound by the next status call when it has no claims, and otherwise
reads as unknown so that the controller asks for its start again (which writes the claims'
allocation before the binding). A pod on a node that no longer exists
is LOST. Stop deletes the pod and releases its claims (reservedFor; a claim no one holds any
more is deallocated, and deleted when aipaas created it).
Pods that others created (kubectl, Helm, operators) are bound through ``place`` (take.py); their
gangs are read from PodGroups (podgroups.py) and ``record_waiting`` tells them why they wait.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from aipaas.api.devices import ResourceSlice
from aipaas.backends.base import Inventory, LaunchRequest, TaskState, TaskStatus
from aipaas.backends.foreign_pods import IMPORTED_ANNOTATION, ForeignPod
from aipaas.backends.kubernetes import manifests as m
from aipaas.backends.kubernetes.api import Conflict, KubeApi
from aipaas.backends.kubernetes.claims import pod_claim_names, release_claims, reserve_claim
from aipaas.backends.kubernetes.events import EventSink
from aipaas.backends.kubernetes.fencing import ClusterFence
from aipaas.backends.kubernetes.foreign import IMPORTED_BY, foreign_pod, is_pending_foreign
from aipaas.backends.kubernetes.informer import Informer, start_all
from aipaas.backends.kubernetes.inventory import inventory
from aipaas.backends.kubernetes.job_services import ensure as ensure_service
from aipaas.backends.kubernetes.job_services import headless_service, is_multi_pod, with_job_dns
from aipaas.backends.kubernetes.job_services import reconcile as reconcile_services
from aipaas.backends.kubernetes.options import KubeOptions
from aipaas.backends.kubernetes.pod_logs import LogCopier
from aipaas.backends.kubernetes.pod_status import request_of, task_status, tasks_by_request
from aipaas.backends.kubernetes.podgroups import PodGroups
from aipaas.backends.kubernetes.take import imported_pod_name, take_imported

log = logging.getLogger("aipaas.backends.kubernetes")

WATCHED = ("Node", "Pod", "ResourceSlice", "ResourceClaim")
#: a pod taken as a job and not started this long is marked by a patch of its own (a pod
#: started sooner gets the mark with the start's patch: one request fewer per pod). The mark
#: tells people which job took a pod that waits; no restart needs it (the import finds the
#: job it stored by name), so it waits long enough that a backlog being bound costs none
MARK_AFTER_SECONDS = 60.0
#: ended starts are dropped from the table of starts once it holds this many (or twice what
#: was left after the last drop)
PRUNE_STARTS = 256


class KubernetesBackend:
    name = "kubernetes"

    def __init__(self, api: KubeApi, options: KubeOptions) -> None:
        self._api = api
        self.options = options
        self._local = threading.local()  # a start worker's own client
        self._pool = (
            ThreadPoolExecutor(options.start_workers, "kube-start", self._worker_client)
            if options.start_workers > 0
            else None
        )
        self._starting: dict[str, Future[None]] = {}
        self._prune_at = PRUNE_STARTS  # ``_starting`` size at which ended starts are dropped
        #: the slices read by ``inventory``, by (name, resourceVersion) (inventory.py)
        self._slices_read: dict[tuple[str, str], ResourceSlice | None] = {}
        self._worker_clients: list[KubeApi] = []
        #: others' pods taken as jobs by this process (their mark may still be on its way)
        self._imported: set[str] = set()
        #: pods taken whose mark is still to be written: uid -> (when due, pod, job)
        self._marks_due: dict[str, tuple[float, ForeignPod, str]] = {}
        self._informers: dict[str, Informer] | None = None
        self.events = EventSink(api)
        self.pod_groups = PodGroups(api)
        #: pods' logs into the tasks' log files (running pods' in a thread of its own when
        #: starts have theirs)
        self.logs = LogCopier(api, options.log_seconds, background=options.start_workers > 0)
        self._end_reported: set[str] = set()  # deleted pods whose end was answered once
        self._released: set[str] = set()  # ended pods whose claims were released
        self._stopped: set[str] = set()  # tasks this process asked to stop
        #: tasks whose start in this process made and bound their pod
        self._started: set[str] = set()
        #: pods this process bound (uid -> node), for as long as the watch may still bring an
        #: older copy of them without their node
        self._bound: dict[str, str] = {}
        #: headless Services (namespace, name) whose pods starts are making now (how many)
        self._service_starts: dict[tuple[str, str], int] = {}
        #: headless Services this process made (or a start is making) and did not delete
        self._services_made: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        #: the highest fencing token, kept in the cluster (fencing.py)
        self.fence = ClusterFence(lambda: self.api, options.fencing_namespace)

    @property
    def api(self) -> KubeApi:
        """The client: a start worker's own, else the backend's."""
        own: KubeApi | None = getattr(self._local, "api", None)
        return own if own is not None else self._api

    def _worker_client(self) -> None:
        self._local.api = self._api.fork()
        self._worker_clients.append(self._local.api)

    # -- the caches ----------------------------------------------------------------------------

    @property
    def informers(self) -> dict[str, Informer]:
        """The informers, started (and listed once) on first use."""
        if self._informers is None:
            # aipaas's task pods by request id: status asks for thousands each cycle
            indexes = {"Pod": request_of}
            made = {kind: Informer(self.api, kind, index=indexes.get(kind)) for kind in WATCHED}
            # only the headless Services aipaas made (job_services.py), not every Service
            made["Service"] = Informer(self.api, "Service", labels={m.MANAGED_LABEL: "true"})
            start_all(made)
            self._informers = made
        return self._informers

    def cached(self, kind: str) -> list[dict[str, Any]]:
        return self.informers[kind].items()

    def remember(self, obj: Mapping[str, Any]) -> None:
        """Something this backend wrote, into its kind's cache."""
        informer = self.informers.get(str(obj.get("kind")))
        if informer is not None and obj.get("metadata"):
            informer.remember(obj)

    # -- inventory -----------------------------------------------------------------------------

    def inventory(self) -> Inventory:
        pods = self.cached("Pod")
        ours = self.informers["Pod"].indexed_all()
        tasks = {p["metadata"]["uid"] for p in tasks_by_request(ours).values()}
        return inventory(
            self.cached("Node"),
            [p for p in pods if p["metadata"]["uid"] not in tasks],
            self.cached("ResourceSlice"),
            self.cached("ResourceClaim"),
            tasks,
            self._slices_read,
        )

    def _node_names(self) -> set[str]:
        return {n["metadata"]["name"] for n in self.cached("Node")}

    # -- start ---------------------------------------------------------------------------------

    def start(self, request: LaunchRequest) -> None:
        # before a worker takes it: a refused start raises to the controller that asked
        self.fence.admit(request.fencing_token, request.request_id)
        if self._pool is None:
            self._start_now(request)
            return
        rid = request.request_id
        under_way = self._starting.get(rid)
        if under_way is not None and not under_way.done():
            return
        if rid in self._started and self._made(request):
            return  # made and bound by a start of this process (asked again while it bound)
        self._starting[rid] = self._pool.submit(self._start_logged, request)
        if len(self._starting) > self._prune_at:  # the ended ones go, now and then: not a
            # walk over every start at each start (a done future reads as no start at all)
            for done in [k for k, f in self._starting.items() if f.done() and k != rid]:
                del self._starting[done]
            self._prune_at = max(PRUNE_STARTS, 2 * len(self._starting))

    def _made(self, request: LaunchRequest) -> bool:
        """The cache holds the request's pod (by its name, not a walk over every pod: a start
        is asked for each placed task of every cycle)."""
        namespace = self.options.namespace(request.tenant)
        imported = IMPORTED_ANNOTATION in request.annotations
        name = imported_pod_name(request) if imported else m.pod_name(request)
        pod = self.informers["Pod"].get(namespace, name) if name is not None else None
        annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
        return annotations.get(m.REQUEST_ANNOTATION) == request.request_id

    def _start_logged(self, request: LaunchRequest) -> None:
        try:
            self._start_now(request)
        except Exception as err:  # the task stays "unknown": the controller asks again
            log.warning("start of %s failed: %s", request.request_id, err)
            return
        with self._lock:
            self._started.add(request.request_id)

    def _start_now(self, request: LaunchRequest) -> None:
        if IMPORTED_ANNOTATION in request.annotations:
            take_imported(self, request)
            return
        namespace = self.options.namespace(request.tenant)
        names = [str(c["metadata"]["name"]) for c in request.claims]
        claims = self.informers["ResourceClaim"]
        for document in request.claims:
            name = str(document["metadata"]["name"])
            if claims.get(namespace, name) is not None:
                continue  # shared, or made by an earlier start
            with contextlib.suppress(Conflict):
                self.remember(self.api.create(m.claim_manifest(document, namespace)))
        manifest = m.pod_manifest(request, self.options, names, request.labels)
        if not is_multi_pod(request.env):
            self._create_pod(request, manifest)
            return
        # its ranks find rank 0 by name (job_services.py); the Service is made before the pod
        # and kept while a start makes its pods
        manifest = with_job_dns(manifest, request, namespace, self.options.cluster_domain)
        service = headless_service(request.job, request.tenant, namespace)
        key = (namespace, str(service["metadata"]["name"]))
        with self._lock:
            self._service_starts[key] = self._service_starts.get(key, 0) + 1
            # one create per Service, though the job's starts run in parallel threads
            known = set(_keys(self.cached("Service"))) | self._services_made
            self._services_made.add(key)
        try:
            made = ensure_service(self.api, service, known)
            if made is not None:
                self.remember(made)
            self._create_pod(request, manifest)
        finally:
            with self._lock:
                self._service_starts[key] -= 1
                if not self._service_starts[key]:
                    del self._service_starts[key]

    def _create_pod(self, request: LaunchRequest, manifest: dict[str, Any]) -> None:
        namespace = manifest["metadata"]["namespace"]
        try:
            pod = self.api.create(manifest)
            self.remember(pod)
        except Conflict:
            found = self.api.get("Pod", manifest["metadata"]["name"], namespace)
            annotations = ((found or {}).get("metadata") or {}).get("annotations") or {}
            if found is None or annotations.get(m.REQUEST_ANNOTATION) != request.request_id:
                # a pod of that name that an earlier start did not make: never bind it
                raise
            pod = found
        self.place(pod, request.node, {str(c["metadata"]["name"]): c for c in request.claims})

    def place(
        self, pod: Mapping[str, Any], node: str, claims: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """Allocate the pod's claims (as aipaas allocated them) and bind it to ``node``; what
        is done already is skipped (a claim reserved for it, a pod bound)."""
        if (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("uid") in self._bound:
            return
        namespace = pod["metadata"]["namespace"]
        cache = self.informers["ResourceClaim"]
        for name, document in claims.items():
            allocation = (document.get("status") or {}).get("allocation") or {}
            reserve_claim(self.api, namespace, name, allocation, node, pod, cache)
        self._bind(pod, node)

    def _bind(self, pod: Mapping[str, Any], node: str) -> bool:
        meta = pod["metadata"]
        try:
            self.api.bind(m.binding(pod, node))
        except Conflict:
            log.info("pod %s/%s was bound already", meta["namespace"], meta["name"])
            self._bound[str(meta.get("uid"))] = node
            return False
        self._bound[str(meta.get("uid"))] = node
        bound = copy.deepcopy(dict(pod))
        bound["spec"]["nodeName"] = node
        self.remember(bound)
        self.events.scheduled(pod, node)
        return True

    # -- pods that others submitted (backends/foreign_pods.py) -----------------------------

    def pending_foreign_pods(self) -> list[ForeignPod]:
        self._mark_due()
        scheduler = self.options.scheduler_name
        out = []
        for document in self.cached("Pod"):
            if not is_pending_foreign(document, scheduler):
                continue
            if document["metadata"].get("uid") in self._imported:
                continue
            pod = foreign_pod(document)
            group = self.pod_groups.of(document)
            if group is not None:
                pod = replace(
                    pod,
                    group=group.name,
                    group_size=max(group.min_member, pod.group_size),
                    queue=pod.queue or group.queue,
                )
            out.append(pod)
        return out

    def foreign_claims(self, namespace: str, names: Sequence[str]) -> list[dict[str, Any]]:
        cache = self.informers["ResourceClaim"]
        found = (
            cache.get(namespace, n) or self.api.get("ResourceClaim", n, namespace) for n in names
        )
        return [c for c in found if c is not None]

    def mark_imported(self, pods: Sequence[ForeignPod], job: str) -> None:
        """Taken at once in this process; marked on the pods (``aipaas.dev/imported-as``)
        by the start that binds them, in the same patch that labels them as aipaas's tasks,
        or, for pods still waiting ``MARK_AFTER_SECONDS`` later, by a patch of their own (a
        mark lost in a crash is made again: the import finds the job it stored by name)."""
        due = time.monotonic() + MARK_AFTER_SECONDS
        with self._lock:
            for pod in pods:
                self._imported.add(pod.uid)
                self._marks_due[pod.uid] = (due, pod, job)
        if self._pool is None:
            self._mark_due(force=True)

    def _mark_due(self, force: bool = False) -> None:
        """Mark the taken pods whose start has not marked them in time."""
        now = time.monotonic()
        with self._lock:
            due = [e for e in self._marks_due.values() if force or e[0] <= now]
            for _, pod, _ in due:
                del self._marks_due[pod.uid]
        for _, pod, job in due:
            if self._pool is None:
                self._mark([pod], job)
            else:
                self._pool.submit(self._mark, [pod], job)

    def marked_by_start(self, uid: str) -> None:
        """A start labelled the pod as its task, with the mark: no patch of its own."""
        with self._lock:
            self._marks_due.pop(uid, None)

    def _mark(self, pods: Sequence[ForeignPod], job: str) -> None:
        for pod in pods:
            patch = {"metadata": {"annotations": {IMPORTED_BY: job}}}
            try:
                self.remember(self.api.patch("Pod", pod.name, patch, pod.namespace))
            except Exception as err:
                log.warning("pod %s/%s not marked: %s", pod.namespace, pod.name, err)
                self._imported.discard(pod.uid)

    def tenant_of(self, namespace: str) -> str | None:
        return self.options.tenant(namespace)

    def record_waiting(self, pods: Sequence[tuple[str, str]], note: str) -> None:
        """A FailedScheduling event on each of the pods ((namespace, name), still unbound),
        saying why aipaas does not place them yet; repeated only when the reason changes."""
        cache = self.informers["Pod"]
        for namespace, name in pods:
            pod = cache.get(namespace, name)
            if pod is not None and not (pod.get("spec") or {}).get("nodeName"):
                self.events.failed_scheduling(pod, note)

    # -- status, stop, logs --------------------------------------------------------------------

    def _ours(self, request_ids: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
        """aipaas's pods by request id, from the cache; an id the cache does not know yet is
        looked up on the server (a pod a start made before the watch brought it).

        The starts under way are read before the cache: a start that ends between the two
        has put its pod in the cache already (``remember``), and one read as under way is
        not looked up, so a start ending while the cache is read costs no list."""
        under_way = {rid for rid, started in list(self._starting.items()) if not started.done()}
        cache = self.informers["Pod"]
        pods: dict[str, dict[str, Any]] = {}
        for rid in request_ids:
            if rid in pods:
                continue
            known = cache.indexed(rid)
            if known:
                pods.update(tasks_by_request(known))
            elif rid not in under_way:  # not known, and its start has not made it yet
                found = self.api.list("Pod", labels={m.REQUEST_LABEL: m.request_hash(rid)})
                pods.update(tasks_by_request(found))
        return pods

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        pods = self._ours(request_ids)
        nodes = self._node_names()
        self.logs.begin_call()
        out: dict[str, TaskStatus] = {}
        for rid in request_ids:
            pod = pods.get(rid)
            if pod is None:
                out[rid] = self._gone(rid)
                continue
            finished = self._finish_binding(pod, rid)
            if finished is None:
                message = "its claims are not allocated yet: the start is asked again"
                out[rid] = TaskStatus(rid, TaskState.UNKNOWN, None, message)
                continue
            pod = finished
            if not pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
                # made but not bound yet (its start is under way): it runs nowhere, and a
                # record must not read Running before its pod is bound (a restart would
                # then find a Running task whose pod is unbound, and give it up)
                message = "its pod is not bound yet: the start is under way"
                out[rid] = TaskStatus(rid, TaskState.UNKNOWN, None, message)
                continue
            answer = task_status(rid, pod, nodes)
            out[rid] = answer
            over = answer.state in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.LOST)
            self.logs.copy(rid, pod, over)
            if over:
                self._after_end(rid, pod)
        self._reconcile_services()
        return out

    def _gone(self, rid: str) -> TaskStatus:
        """No pod of ``rid``: one this process deleted to stop it has ended (another
        controller may remove a deleted pod's finalizers, KWOK does, before its end was
        read); any other is unknown here."""
        if rid in self._stopped:
            return TaskStatus(rid, TaskState.LOST, None, "its pod was deleted to stop it")
        return TaskStatus(rid, TaskState.UNKNOWN)

    def _reconcile_services(self) -> None:
        """The headless Services of multi-pod jobs: made for live pods, deleted after."""
        try:
            with self._lock:
                starting = set(self._service_starts)
            pods, services = self.cached("Pod"), self.cached("Service")
            made, gone = reconcile_services(self.api, pods, services, starting)
        except Exception as err:  # tried again at the next status call
            log.warning("the jobs' headless Services could not be reconciled: %s", err)
            return
        for service in made:
            self.remember(service)
        for namespace, name in gone:
            self.informers["Service"].forget(namespace, name)
            with self._lock:
                self._services_made.discard((namespace, name))

    def _after_end(self, rid: str, pod: dict[str, Any]) -> None:
        """An ended pod's claims are released; a deleted one keeps aipaas's finalizer until
        its end was answered twice (so a crash between answers loses no exit code)."""
        if rid not in self._released:
            release_claims(self.api, pod, self.informers["ResourceClaim"])
            self._released.add(rid)
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp"):
            return
        # a pod aipaas deleted to stop it goes once it ended (the controller may not ask
        # again); one deleted by someone else stays until its end was answered twice
        if rid not in self._end_reported and rid not in self._stopped:
            self._end_reported.add(rid)
            return
        self._drop_finalizer(pod)

    def _drop_finalizer(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        kept = [f for f in meta.get("finalizers") or [] if f != m.POD_FINALIZER]
        if len(kept) != len(meta.get("finalizers") or []):
            patch = {"metadata": {"finalizers": kept or None}}
            written = self.api.patch("Pod", meta["name"], patch, meta["namespace"])
            if written.get("metadata", {}).get("deletionTimestamp") and not kept:
                self.informers["Pod"].forget(meta["namespace"], meta["name"])
            else:
                self.remember(written)

    def _finish_binding(self, pod: dict[str, Any], rid: str) -> dict[str, Any] | None:
        """A pod a crashed start created but did not bind: bind it where aipaas chose. One
        with claims is not bound here (their allocation is the start's to write, before the
        binding): None, so that the task reads as unknown and the controller asks for the
        start again. A pod whose start is under way is left to it."""
        meta = pod["metadata"]
        node = (meta.get("annotations") or {}).get(m.NODE_ANNOTATION)
        if pod["spec"].get("nodeName"):
            self._bound.pop(meta.get("uid"), None)  # the cache says so itself now
        elif meta.get("uid") in self._bound:
            pod = copy.deepcopy(pod)  # bound by this process; the watch has not said so yet
            pod["spec"]["nodeName"] = self._bound[meta["uid"]]
            return pod
        under_way = self._starting.get(rid)
        if under_way is not None and not under_way.done():
            return pod
        if node and not pod["spec"].get("nodeName") and not meta.get("deletionTimestamp"):
            if pod_claim_names(pod):
                return None
            if not self._bind(pod, node):
                pod = self.api.get("Pod", meta["name"], meta["namespace"]) or pod
                self.remember(pod)
                return pod
            pod = copy.deepcopy(pod)
            pod["spec"]["nodeName"] = node
        return pod

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        """Delete the pod (the kubelet ends it); one that never ran, or whose node is gone,
        has no kubelet to end it and goes at once."""
        under_way = self._starting.pop(request_id, None)
        self._started.discard(request_id)
        if under_way is not None:
            with contextlib.suppress(Exception):
                under_way.result(timeout=120)  # no pod may be made after its stop
        pod = self._ours([request_id]).get(request_id)
        if pod is None:
            return
        meta = pod["metadata"]
        self._stopped.add(request_id)
        self.api.delete("Pod", meta["name"], meta["namespace"], grace=max(int(grace_seconds), 0))
        release_claims(self.api, pod, self.informers["ResourceClaim"])
        node = pod["spec"].get("nodeName")
        if not node or node not in self._node_names():
            fresh = self.api.get("Pod", meta["name"], meta["namespace"])
            if fresh is not None:
                self._drop_finalizer(fresh)

    def close(self) -> None:
        self.logs.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            for client in self._worker_clients:
                if client is not self._api:
                    client.close()
        for informer in (self._informers or {}).values():
            informer.stop()
        self.events.close()
        self.api.close()


def _keys(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects]
