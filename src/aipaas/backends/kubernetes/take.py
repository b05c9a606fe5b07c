"""Starting a task of a job made from others' pods: the pod exists; aipaas takes it (its
labels and annotations, so that status finds it by request id, and aipaas's finalizer),
allocates its claims and binds it. Nothing is created."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aipaas.backends.base import LaunchRequest
from aipaas.backends.foreign_pods import IMPORTED_ANNOTATION
from aipaas.backends.kubernetes import manifests as m
from aipaas.backends.kubernetes.claims import pod_claim_names

if TYPE_CHECKING:
    from aipaas.backends.kubernetes.backend import KubernetesBackend


def _group(task: str) -> str:
    """``worker-0`` -> ``worker``: each imported pod is the one replica of its task group."""
    return task.rsplit("-", 1)[0]


def take_imported(backend: KubernetesBackend, request: LaunchRequest) -> None:
    pods = json.loads(request.annotations[IMPORTED_ANNOTATION])
    entry = pods.get(_group(request.task))
    if not isinstance(entry, dict):
        raise LookupError(f"job {request.job} names no pod for task {request.task}")
    namespace = backend.options.namespace(request.tenant)
    pod = backend.api.get("Pod", entry["name"], namespace)
    if pod is None or pod["metadata"]["uid"] != entry.get("uid"):
        raise LookupError(f"pod {namespace}/{entry['name']} is gone")
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
            },
            "finalizers": [*finalizers, m.POD_FINALIZER]
            if m.POD_FINALIZER not in finalizers
            else finalizers,
        }
        pod = backend.api.patch("Pod", meta["name"], {"metadata": patch}, namespace)
        backend.remember(pod)
    uses = set(pod_claim_names(pod))
    claims = {
        str(c["metadata"]["name"]): c for c in request.claims if c["metadata"]["name"] in uses
    }
    backend.place(pod, request.node, claims)
