"""An optional backend capability: work that others submitted to the engine for aipaas to
schedule (on Kubernetes, pods with ``schedulerName: aipaas`` from kubectl, Helm, operators).

The controller's import step (controller/kube_import.py) reads the pending ones, stores a Job
for each gang of them, and marks them imported; the backend's ``start`` then binds the existing
pod rather than creating one (the job's ``IMPORTED_ANNOTATION`` names its pods).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, cast

#: on a Job made from others' pods: JSON {task group: {"name": pod, "uid": uid}}; a system
#: key (aipaas.dev/), so that no user's job can name pods to bind
IMPORTED_ANNOTATION: Final = "aipaas.dev/kube-pods"


@dataclass(frozen=True)
class ForeignClaim:
    """A claim a pod uses: its name in the pod and the ResourceClaim's name."""

    name: str
    claim: str


@dataclass(frozen=True)
class ForeignPod:
    namespace: str
    name: str
    uid: str
    #: the gang it belongs to (Volcano's, KAI's or coscheduling's pod-group convention);
    #: None: a gang of its own
    group: str | None
    #: how many pods the gang waits for, where the pods say (0: those seen, once settled)
    group_size: int
    #: the queue the pod names (KAI, Volcano, Kueue conventions); None: the default
    queue: str | None
    command: tuple[str, ...]
    cpu_milli: int
    memory_mib: int
    gpus: int  # nvidia.com/gpu (the device plugin's), 0 when it uses claims or none
    claims: tuple[ForeignClaim, ...] = ()
    #: claims made from the pod's templates that the cluster has not made yet
    claims_pending: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)


class ForeignPods(Protocol):
    def pending_foreign_pods(self) -> list[ForeignPod]:
        """Unbound pods for aipaas that aipaas has not taken yet."""
        ...

    def foreign_claims(self, namespace: str, names: Sequence[str]) -> list[dict[str, Any]]:
        """The ResourceClaims (resource.k8s.io/v1 documents) the pods use."""
        ...

    def mark_imported(self, pods: Sequence[ForeignPod], job: str) -> None:
        """Mark the pods as taken by ``job`` (after it is stored: a crash between is undone
        by the next import, which finds the job by its name)."""
        ...

    def tenant_of(self, namespace: str) -> str | None:
        """The tenant a namespace maps to (None: none)."""
        ...


def foreign_pods(backend: object) -> ForeignPods | None:
    """The backend, when it has work that others submitted."""
    if all(
        hasattr(backend, name)
        for name in ("pending_foreign_pods", "foreign_claims", "mark_imported", "tenant_of")
    ):
        return cast(ForeignPods, backend)
    return None
