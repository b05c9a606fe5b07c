"""Pods that others created with ``schedulerName: aipaas``: read as ``ForeignPod``s (pure),
grouped by the pod-group conventions of Volcano, KAI-Scheduler and the coscheduling plugin.

Group: the annotation ``scheduling.k8s.io/group-name`` (Volcano), the annotation
``pod-group-name`` (KAI-Scheduler), the label ``scheduling.x-k8s.io/pod-group`` (coscheduling),
or ``kubernetes.aipaas.dev/group`` (label or annotation). Gang size:
``kubernetes.aipaas.dev/group-size`` where given (the group waits for that many pods).
Queue: the label ``kai.scheduler/queue`` (KAI; ``runai/queue`` before it), the annotation
``scheduling.volcano.sh/queue-name`` (Volcano), the label ``kueue.x-k8s.io/queue-name``
(Kueue), or ``kubernetes.aipaas.dev/queue``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aipaas.api.quantity import parse_quantity
from aipaas.backends.foreign_pods import ForeignClaim, ForeignPod
from aipaas.backends.kubernetes.manifests import MANAGED_LABEL

IMPORTED_BY: Final = "aipaas.dev/imported-as"  # pod annotation: the job that took it
GROUP_KEYS: Final = (
    "scheduling.k8s.io/group-name",
    "pod-group-name",
    "scheduling.x-k8s.io/pod-group",
    "kubernetes.aipaas.dev/group",
)
SIZE_KEY: Final = "kubernetes.aipaas.dev/group-size"
QUEUE_KEYS: Final = (
    "kai.scheduler/queue",
    "runai/queue",
    "scheduling.volcano.sh/queue-name",
    "kueue.x-k8s.io/queue-name",
    "kubernetes.aipaas.dev/queue",
)


def _first(keys: tuple[str, ...], *sources: Mapping[str, str]) -> str | None:
    for key in keys:
        for source in sources:
            if source.get(key):
                return source[key]
    return None


def _size(text: str | None) -> int:
    try:
        return max(int(text or 0), 0)
    except ValueError:
        return 0


def is_pending_foreign(pod: Mapping[str, Any], scheduler: str) -> bool:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return (
        spec.get("schedulerName") == scheduler
        and not spec.get("nodeName")
        and not meta.get("deletionTimestamp")
        and (meta.get("labels") or {}).get(MANAGED_LABEL) != "true"
        and IMPORTED_BY not in (meta.get("annotations") or {})
        and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
    )


def _claims(pod: Mapping[str, Any]) -> tuple[tuple[ForeignClaim, ...], bool]:
    """The pod's claims by their ResourceClaim names; True when a template's claim is not
    made yet (the resourceclaim controller writes it into the pod's status)."""
    made = {
        s["name"]: s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out, pending = [], False
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        claim = entry.get("resourceClaimName") or made.get(entry["name"])
        if claim:
            out.append(ForeignClaim(entry["name"], claim))
        else:
            pending = True
    return tuple(out), pending


def foreign_pod(pod: Mapping[str, Any]) -> ForeignPod:
    meta, spec = pod["metadata"], pod["spec"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    cpu = memory = gpus = 0
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        cpu += int(parse_quantity(str(requests.get("cpu", 0))) * 1000)
        memory += int(parse_quantity(str(requests.get("memory", 0))) / (1 << 20))
        gpus += int(parse_quantity(str((resources.get("limits") or {}).get("nvidia.com/gpu", 0))))
    first = (spec.get("containers") or [{}])[0]
    command = tuple(first.get("command") or []) + tuple(first.get("args") or [])
    claims, pending = _claims(pod)
    return ForeignPod(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        group=_first(GROUP_KEYS, annotations, labels),
        group_size=_size(_first((SIZE_KEY,), annotations, labels)),
        queue=_first(QUEUE_KEYS, labels, annotations),
        command=command or (f"(entrypoint of {first.get('image', '')})",),
        cpu_milli=cpu,
        memory_mib=memory,
        gpus=gpus,
        claims=claims,
        claims_pending=pending,
        labels=dict(labels),
    )
