"""The Kubernetes backend: a task is a Pod that aipaas places, its claims allocated by aipaas.

Start (idempotent by request id: the pod's name is derived from it, so a second start finds
the first one's pod and finishes what it left undone):
  1. create the task's ResourceClaims that do not exist (the spec aipaas stored);
  2. create the Pod with ``schedulerName`` aipaas and the node it chose in an annotation;
  3. for each claim, as the kube-scheduler's DRA plugin does in PreBind: add the finalizer,
     then write ``status.allocation`` and ``reservedFor`` the pod (one PUT of the status);
  4. POST the pods/binding to the node.
Status is read from the pods carrying aipaas's label (one list per call): level-triggered and
crash-safe, a restarted server adopts its pods by label and creates no duplicates; a pod left
unbound by a crash between 2 and 4 is bound by the next status call. A pod on a node that no
longer exists is LOST. Stop deletes the pod and releases its claims (reservedFor; a claim no one
holds any more is deallocated, and deleted when aipaas created it).
Pods that others created (kubectl, Helm, operators) are bound through ``bind_existing``
(backends/kubernetes/foreign.py is the capability the controller's import step uses).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aipaas.backends.base import Inventory, LaunchRequest, TaskState, TaskStatus
from aipaas.backends.foreign_pods import IMPORTED_ANNOTATION, ForeignPod
from aipaas.backends.kubernetes import manifests as m
from aipaas.backends.kubernetes.api import Conflict, KubeApi
from aipaas.backends.kubernetes.claims import release_claims, reserve_claim
from aipaas.backends.kubernetes.foreign import IMPORTED_BY, foreign_pod, is_pending_foreign
from aipaas.backends.kubernetes.inventory import inventory
from aipaas.backends.kubernetes.options import KubeOptions
from aipaas.backends.kubernetes.pod_status import task_status, tasks_by_request
from aipaas.backends.kubernetes.take import take_imported

log = logging.getLogger("aipaas.backends.kubernetes")


class KubernetesBackend:
    name = "kubernetes"

    def __init__(self, api: KubeApi, options: KubeOptions) -> None:
        self.api = api
        self.options = options
        self._nodes: set[str] | None = None  # as of the last inventory
        self._log_copied: dict[str, float] = {}
        self._end_reported: set[str] = set()  # deleted pods whose end was answered once
        self._released: set[str] = set()  # ended pods whose claims were released

    # -- inventory -----------------------------------------------------------------------------

    def inventory(self) -> Inventory:
        pods = self.api.list("Pod")
        tasks = {p["metadata"]["uid"] for p in tasks_by_request(pods).values()}
        found = inventory(
            self.api.list("Node"),
            [p for p in pods if p["metadata"]["uid"] not in tasks],
            self.api.list("ResourceSlice"),
            self.api.list("ResourceClaim"),
            tasks,
        )
        self._nodes = {n.name for n in found.nodes}
        return found

    # -- start ---------------------------------------------------------------------------------

    def start(self, request: LaunchRequest) -> None:
        if IMPORTED_ANNOTATION in request.annotations:
            take_imported(self, request)
            return
        namespace = self.options.namespace(request.tenant)
        names = [str(c["metadata"]["name"]) for c in request.claims]
        for document in request.claims:
            with contextlib.suppress(Conflict):  # shared, or made by an earlier start
                self.api.create(m.claim_manifest(document, namespace))
        manifest = m.pod_manifest(request, self.options, names, request.labels)
        try:
            pod = self.api.create(manifest)
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
        if (pod.get("spec") or {}).get("nodeName"):
            return
        namespace = pod["metadata"]["namespace"]
        for name, document in claims.items():
            allocation = (document.get("status") or {}).get("allocation") or {}
            reserve_claim(self.api, namespace, name, allocation, node, pod)
        try:
            self.api.bind(m.binding(pod, node))
        except Conflict:
            log.info("pod %s/%s was bound already", namespace, pod["metadata"]["name"])

    # -- pods that others submitted (backends/foreign_pods.py) -----------------------------

    def pending_foreign_pods(self) -> list[ForeignPod]:
        pods = self.api.list("Pod", fields={"spec.schedulerName": self.options.scheduler_name})
        return [foreign_pod(p) for p in pods if is_pending_foreign(p, self.options.scheduler_name)]

    def foreign_claims(self, namespace: str, names: Sequence[str]) -> list[dict[str, Any]]:
        found = (self.api.get("ResourceClaim", name, namespace) for name in names)
        return [c for c in found if c is not None]

    def mark_imported(self, pods: Sequence[ForeignPod], job: str) -> None:
        for pod in pods:
            patch = {"metadata": {"annotations": {IMPORTED_BY: job}}}
            self.api.patch("Pod", pod.name, patch, pod.namespace)

    def tenant_of(self, namespace: str) -> str | None:
        return self.options.tenant(namespace)

    # -- status, stop, logs --------------------------------------------------------------------

    def _ours(self) -> dict[str, dict[str, Any]]:
        return tasks_by_request(self.api.list("Pod", labels={m.MANAGED_LABEL: "true"}))

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        pods = self._ours()
        if self._nodes is None:
            self._nodes = {n["metadata"]["name"] for n in self.api.list("Node")}
        out: dict[str, TaskStatus] = {}
        for rid in request_ids:
            pod = pods.get(rid)
            if pod is None:
                out[rid] = TaskStatus(rid, TaskState.UNKNOWN)
                continue
            self._finish_binding(pod)
            answer = task_status(rid, pod, self._nodes)
            out[rid] = answer
            over = answer.state in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.LOST)
            self._copy_log(rid, pod, over)
            if over:
                self._after_end(rid, pod)
        return out

    def _after_end(self, rid: str, pod: dict[str, Any]) -> None:
        """An ended pod's claims are released; a deleted one keeps aipaas's finalizer until
        its end was answered twice (so a crash between answers loses no exit code)."""
        if rid not in self._released:
            release_claims(self.api, pod)
            self._released.add(rid)
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp"):
            return
        if rid not in self._end_reported:
            self._end_reported.add(rid)
            return
        self._drop_finalizer(pod)

    def _drop_finalizer(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        kept = [f for f in meta.get("finalizers") or [] if f != m.POD_FINALIZER]
        if len(kept) != len(meta.get("finalizers") or []):
            self.api.patch(
                "Pod", meta["name"], {"metadata": {"finalizers": kept or None}}, meta["namespace"]
            )

    def _finish_binding(self, pod: dict[str, Any]) -> None:
        """A pod a crashed start created but did not bind: bind it where aipaas chose."""
        meta = pod["metadata"]
        node = (meta.get("annotations") or {}).get(m.NODE_ANNOTATION)
        if node and not pod["spec"].get("nodeName") and not meta.get("deletionTimestamp"):
            try:
                self.api.bind(m.binding(pod, node))
                pod["spec"]["nodeName"] = node
            except Conflict:
                pass

    def _copy_log(self, rid: str, pod: Mapping[str, Any], ended: bool) -> None:
        """The pod's log into the task's log file (the server reads logs from files): when
        it ends, and every ``log_seconds`` while it runs."""
        meta = pod["metadata"]
        path = (meta.get("annotations") or {}).get(m.LOG_ANNOTATION)
        last = self._log_copied.get(rid)
        if not path or not pod["spec"].get("nodeName") or last == float("inf"):
            return
        if not ended and last is not None and time.monotonic() - last < self.options.log_seconds:
            return
        try:
            text = self.api.log(meta["name"], meta["namespace"])
        except Exception as err:  # a pod whose container has not started has no log yet
            log.debug("no log for %s yet: %s", meta["name"], err)
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        self._log_copied[rid] = float("inf") if ended else time.monotonic()

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        """Delete the pod (the kubelet ends it); one that never ran, or whose node is gone,
        has no kubelet to end it and goes at once."""
        pod = self._ours().get(request_id)
        if pod is None:
            return
        meta = pod["metadata"]
        self.api.delete("Pod", meta["name"], meta["namespace"], grace=max(int(grace_seconds), 0))
        release_claims(self.api, pod)
        node = pod["spec"].get("nodeName")
        if not node or (self._nodes is not None and node not in self._nodes):
            self._drop_finalizer(pod)

    def close(self) -> None:
        self.api.close()
