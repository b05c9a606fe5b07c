"""Starting a task of a job made from others' pods: the pod exists; aipaas takes it (its
labels and annotations, so that status finds it by request id, and aipaas's finalizer),
allocates its claims and binds it. Nothing is created."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aipaas.backends.base import LaunchRequest
from aipaas.backends.foreign_pods import IMPORTED_ANNOTATION
from aipaas.backends.kubernetes import manifests as m
from aipaas.backends.kubernetes.api import Conflict
from aipaas.backends.kubernetes.claims import pod_claim_names
from aipaas.backends.kubernetes.foreign import IMPORTED_BY

if TYPE_CHECKING:
    from aipaas.backends.kubernetes.backend import KubernetesBackend


def _group(task: str) -> str:
    """``worker-0`` -> ``worker``: each imported pod is the one replica of its task group."""
    return task.rsplit("-", 1)[0]


def imported_pod_name(request: LaunchRequest) -> str | None:
    """The name of the others' pod a task of an imported job is (None: the job names none)."""
    entry = json.loads(request.annotations[IMPORTED_ANNOTATION]).get(_group(request.task))
    return str(entry["name"]) if isinstance(entry, dict) and "name" in entry else None


def take_imported(backend: KubernetesBackend, request: LaunchRequest) -> None:
    pods = json.loads(request.annotations[IMPORTED_ANNOTATION])
    entry = pods.get(_group(request.task))
    if not isinstance(entry, dict):
        raise LookupError(f"job {request.job} names no pod for task {request.task}")
    namespace = backend.options.namespace(request.tenant)
    pod = backend.informers["Pod"].get(namespace, entry["name"])
    for attempt in range(2):  # the cache's copy first; on a conflict, the server's
        if pod is None or attempt:
            pod = backend.api.get("Pod", entry["name"], namespace)
        if pod is None or pod["metadata"]["uid"] != entry.get("uid"):
            raise LookupError(f"pod {namespace}/{entry['name']} is gone")
        try:
            pod = _take(backend, request, pod, namespace)
            break
        except Conflict:
            if attempt:
                raise
    if pod is None:
        raise LookupError(f"pod {namespace}/{entry['name']} is gone")
    uses = set(pod_claim_names(pod))
    claims = {
        str(c["metadata"]["name"]): c for c in request.claims if c["metadata"]["name"] in uses
    }
    backend.place(pod, request.node, claims)


def _take(
    backend: KubernetesBackend, request: LaunchRequest, pod: dict[str, Any], namespace: str
) -> dict[str, Any]:
    """The pod labelled, annotated (with the job that took it, backend.mark_imported)
    and finalized as aipaas's task (nothing when it is)."""
    meta = pod["metadata"]
    if (meta.get("annotations") or {}).get(m.REQUEST_ANNOTATION) != request.request_id:
        finalizers = list(meta.get("finalizers") or [])
        patch: dict[str, Any] = {
            "resourceVersion": meta["resourceVersion"],
            "labels": {
                m.MANAGED_LABEL: "true",
                m.REQUEST_LABEL: m.request_hash(request.request_id),
            },
            "annotations": {
                m.REQUEST_ANNOTATION: request.request_id,
                m.NODE_ANNOTATION: request.node,
                m.LOG_ANNOTATION: request.log_path,
                IMPORTED_BY: request.job,
            },
            "finalizers": [*finalizers, m.POD_FINALIZER]
            if m.POD_FINALIZER not in finalizers
            else finalizers,
        }
        pod = backend.api.patch("Pod", meta["name"], {"metadata": patch}, namespace)
        backend.remember(pod)
        backend.marked_by_start(str(meta["uid"]))
    return pod
