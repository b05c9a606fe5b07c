"""The objects the Kubernetes backend writes, as plain resource documents (pure: no I/O).

A task is one Pod with ``schedulerName`` aipaas, bound by a Binding to the node aipaas chose.
A task's claims are ResourceClaims whose status aipaas writes as the kube-scheduler's DRA plugin
does in PreBind: first the finalizer ``resource.kubernetes.io/delete-protection``, then
``status.allocation`` (``devices.results[{request, driver, pool, device}]`` and a
``nodeSelector`` matching the node's ``metadata.name`` field) with ``reservedFor`` the pod
(``{resource: pods, name, uid}``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from aipaas.backends.base import LaunchRequest
from aipaas.backends.kubernetes.options import IMAGE_ANNOTATION, KubeOptions

MANAGED_LABEL: Final = "aipaas.dev/managed"  # "true" on every object aipaas creates
REQUEST_LABEL: Final = "aipaas.dev/request-hash"  # label values are short: a hash of the id
REQUEST_ANNOTATION: Final = "aipaas.dev/request-id"
NODE_ANNOTATION: Final = "aipaas.dev/node"  # where the pod is to be bound (crash-safe bind)
LOG_ANNOTATION: Final = "aipaas.dev/log-path"
CLAIM_FINALIZER: Final = "resource.kubernetes.io/delete-protection"
#: keeps a deleted pod (and its exit code) until aipaas has read how it ended
POD_FINALIZER: Final = "aipaas.dev/task-record"
CONTAINER: Final = "task"

_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def dns_label(text: str, limit: int) -> str:
    cleaned = _NOT_DNS.sub("-", text.lower()).strip("-")
    return cleaned[:limit].rstrip("-") or "x"


def request_hash(request_id: str) -> str:
    return hashlib.sha256(request_id.encode()).hexdigest()[:20]


def pod_name(request: LaunchRequest) -> str:
    """Stable per attempt: a second start finds the first one's pod (no duplicates)."""
    job, task = dns_label(request.job, 30), dns_label(request.task, 20)
    return f"{job}-{task}-{request_hash(request.request_id)[:10]}"


def _label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_VALUE.match(name))


def _labels(request: LaunchRequest, labels: Mapping[str, str]) -> dict[str, str]:
    # the job's labels that Kubernetes accepts as they are (others are left off, not mangled)
    out = {k: v for k, v in labels.items() if _label_key(k) and _LABEL_VALUE.match(v)}
    out.update(
        {
            MANAGED_LABEL: "true",
            REQUEST_LABEL: request_hash(request.request_id),
            "aipaas.dev/job": dns_label(request.job, 63),
            "aipaas.dev/tenant": dns_label(request.tenant, 63),
            "aipaas.dev/task": dns_label(request.task, 63),
        }
    )
    return out


def pod_manifest(
    request: LaunchRequest,
    options: KubeOptions,
    claim_names: list[str],
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The task's Pod, not yet bound (aipaas binds it after writing its claims)."""
    resources: dict[str, Any] = {"requests": {}, "limits": {}}
    if request.cpu_milli:
        resources["requests"]["cpu"] = f"{request.cpu_milli}m"
    if request.memory_mib:
        resources["requests"]["memory"] = f"{request.memory_mib}Mi"
        resources["limits"]["memory"] = f"{request.memory_mib}Mi"
    if request.gpus and not request.devices:  # whole GPUs without DRA: the device plugin's
        resources["limits"]["nvidia.com/gpu"] = str(len(request.gpus))
    if claim_names:
        resources["claims"] = [{"name": f"claim-{i}"} for i in range(len(claim_names))]
    container: dict[str, Any] = {
        "name": CONTAINER,
        # the task's own image (spec.tasks[].image), else the job's annotation, else the default
        "image": request.image or request.annotations.get(IMAGE_ANNOTATION, options.default_image),
        "command": list(request.command),
        "env": [{"name": k, "value": v} for k, v in sorted(request.env.items())],
        "resources": {k: v for k, v in resources.items() if v},
    }
    if request.working_dir:
        container["workingDir"] = request.working_dir
    spec: dict[str, Any] = {
        "schedulerName": options.scheduler_name,
        "restartPolicy": "Never",  # aipaas restarts tasks by policy, as a new attempt
        "containers": [container],
    }
    if claim_names:
        spec["resourceClaims"] = [
            {"name": f"claim-{i}", "resourceClaimName": name} for i, name in enumerate(claim_names)
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(request),
            "namespace": options.namespace(request.tenant),
            "labels": _labels(request, labels or {}),
            "finalizers": [POD_FINALIZER],
            "annotations": {
                REQUEST_ANNOTATION: request.request_id,
                NODE_ANNOTATION: request.node,
                LOG_ANNOTATION: request.log_path,
                "aipaas.dev/job": request.job,
                "aipaas.dev/tenant": request.tenant,
            },
        },
        "spec": spec,
    }


def binding(pod: Mapping[str, Any], node: str) -> dict[str, Any]:
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def claim_manifest(document: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """A claim aipaas creates for one of its tasks, with the spec stored in aipaas."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": document["metadata"]["name"],
            "namespace": namespace,
            "labels": {MANAGED_LABEL: "true"},
        },
        "spec": dict(document["spec"]),
    }


def node_selector(node: str) -> dict[str, Any]:
    """The allocation's node selector for devices local to one node, as the DRA allocator
    writes it: a match on the Node's ``metadata.name`` field."""
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


_RESULT_FIELDS = (
    "request",
    "driver",
    "pool",
    "device",
    "adminAccess",
    "tolerations",
    "shareID",
    "consumedCapacity",
)


def allocation(stored: Mapping[str, Any], node: str) -> dict[str, Any]:
    """status.allocation from aipaas's stored allocation: the results (only the fields of
    resource.k8s.io/v1, empty ones left out), the configs, and the node selector."""
    devices = stored.get("devices") or {}
    results = [
        {k: r[k] for k in _RESULT_FIELDS if r.get(k) not in (None, [], {})}
        for r in devices.get("results") or []
    ]
    out: dict[str, Any] = {
        "devices": {"results": results},
        "nodeSelector": node_selector(node),
        # when it was allocated, as the DRA plugin writes it (1.34+)
        "allocationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if devices.get("config"):
        out["devices"]["config"] = devices["config"]
    return out


def consumer(pod: Mapping[str, Any]) -> dict[str, str]:
    return {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}


def allocated_status(
    claim: Mapping[str, Any],
    stored_allocation: Mapping[str, Any],
    node: str,
    pod: Mapping[str, Any],
) -> dict[str, Any]:
    """The claim with its status written for ``pod``: the allocation (kept when the claim is
    already allocated, as for a claim shared by pods) and the pod added to reservedFor."""
    status = dict(claim.get("status") or {})
    if not status.get("allocation"):
        status["allocation"] = allocation(stored_allocation, node)
    reserved = [
        r for r in status.get("reservedFor") or [] if r.get("uid") != pod["metadata"]["uid"]
    ]
    status["reservedFor"] = [*reserved, consumer(pod)]
    return {**claim, "status": status}
