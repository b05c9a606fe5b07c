"""PodGroups: the gang objects that other tools create beside their pods, read for the pods
with ``schedulerName: aipaas`` so that a gang is bound all together or not at all.

Three kinds are read: Volcano's (``scheduling.volcano.sh/v1beta1``, a pod names it in the
annotation ``scheduling.k8s.io/group-name``; ``spec.minMember``, ``spec.queue``), KAI-Scheduler's
(``scheduling.run.ai/v2alpha2``, named by the pod's annotation, or label, ``pod-group-name``;
``spec.minMember``, ``spec.queue``) and the scheduler-plugins' coscheduling one
(``scheduling.x-k8s.io/v1alpha1``, named by the pod's label ``scheduling.x-k8s.io/pod-group``;
``spec.minMember``). The import step (controller/
kube_import.py) waits for ``minMember`` pods of a group before it takes them as one gang job.
A group is read with one GET when first seen and again at most every ``ttl`` seconds; a kind
whose CRD is not installed answers 404 and counts as no group. Used by backend.py.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from aipaas.backends.kubernetes.api import ApiError, KubeApi

VOLCANO: Final = "PodGroup.scheduling.volcano.sh"
KAI: Final = "PodGroup.scheduling.run.ai"
COSCHEDULING: Final = "PodGroup.scheduling.x-k8s.io"
VOLCANO_KEY: Final = "scheduling.k8s.io/group-name"  # pod annotation
KAI_KEY: Final = "pod-group-name"  # pod annotation (KAI's pod grouper) or label
COSCHEDULING_KEY: Final = "scheduling.x-k8s.io/pod-group"  # pod label


@dataclass(frozen=True)
class PodGroup:
    kind: str
    namespace: str
    name: str
    min_member: int
    queue: str | None


def group_ref(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the PodGroup a pod belongs to, by the kinds' own conventions."""
    meta = pod.get("metadata") or {}
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    if annotations.get(VOLCANO_KEY):
        return (VOLCANO, str(annotations[VOLCANO_KEY]))
    if annotations.get(KAI_KEY) or labels.get(KAI_KEY):
        return (KAI, str(annotations.get(KAI_KEY) or labels[KAI_KEY]))
    if labels.get(COSCHEDULING_KEY):
        return (COSCHEDULING, str(labels[COSCHEDULING_KEY]))
    return None


def parse(kind: str, document: Mapping[str, Any]) -> PodGroup:
    meta, spec = document.get("metadata") or {}, document.get("spec") or {}
    queue = spec.get("queue") if kind in (VOLCANO, KAI) else None
    return PodGroup(
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        min_member=max(int(spec.get("minMember") or 0), 0),
        queue=str(queue) if queue else None,
    )


class PodGroups:
    def __init__(self, api: KubeApi, ttl: float = 5.0) -> None:
        self.api = api
        self.ttl = ttl
        self._seen: dict[tuple[str, str, str], tuple[float, PodGroup | None]] = {}

    def of(self, pod: Mapping[str, Any]) -> PodGroup | None:
        """The PodGroup of a pod, or None (no group named, or none of that name exists)."""
        ref = group_ref(pod)
        if ref is None:
            return None
        kind, name = ref
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        key = (kind, namespace, name)
        now = time.monotonic()
        held = self._seen.get(key)
        if held is not None and now - held[0] < self.ttl:
            return held[1]
        try:
            document = self.api.get(kind, name, namespace)
        except ApiError as err:
            if err.code not in (403, 404):
                raise
            document = None  # the kind is not served here, or aipaas may not read it
        found = parse(kind, document) if document is not None else None
        self._seen[key] = (now, found)
        return found
