"""Writing and releasing a pod's ResourceClaims in the cluster, as the kube-scheduler's DRA
plugin (reserve, in PreBind) and the resourceclaim controller (release) do.

Every write carries the resourceVersion it read. The first attempt reads the claim from the
informer's cache (no request); on a conflict (the cache was behind, or another writer came in
between) the claim is read from the server and the write tried again. What is written goes
back into the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aipaas.backends.kubernetes import manifests as m
from aipaas.backends.kubernetes.api import Conflict, KubeApi
from aipaas.backends.kubernetes.informer import Informer

Claim = dict[str, Any]


def _retry(
    api: KubeApi,
    namespace: str,
    name: str,
    write: Callable[[Claim], Claim | None],
    cache: Informer | None,
) -> None:
    for attempt in range(4):
        claim = cache.get(namespace, name) if cache is not None and attempt == 0 else None
        if claim is None:
            claim = api.get("ResourceClaim", name, namespace)
        if claim is None:
            raise LookupError(f"ResourceClaim {namespace}/{name} does not exist")
        try:
            written = write(claim)
        except Conflict:
            if attempt == 3:
                raise
            continue
        if cache is not None and written is not None:
            cache.remember(written)
        return


def reserve_claim(
    api: KubeApi,
    namespace: str,
    name: str,
    allocation: Mapping[str, Any],
    node: str,
    pod: Mapping[str, Any],
    cache: Informer | None = None,
) -> None:
    """The finalizer first (a claim that is allocated must not vanish under its pod), then
    status.allocation with reservedFor the pod, in one status write."""

    def write(claim: Claim) -> Claim | None:
        meta = claim["metadata"]
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        if any(r.get("uid") == pod["metadata"]["uid"] for r in reserved):
            return None
        finalizers = list(meta.get("finalizers") or [])
        if m.CLAIM_FINALIZER not in finalizers:
            patch = {
                "resourceVersion": meta["resourceVersion"],
                "finalizers": [*finalizers, m.CLAIM_FINALIZER],
            }
            claim = api.patch("ResourceClaim", name, {"metadata": patch}, namespace)
        return api.replace_status(m.allocated_status(claim, allocation, node, pod))

    _retry(api, namespace, name, write, cache)


def pod_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The claims a pod uses: named ones, and those made from its templates (pod status)."""
    names = [
        c["resourceClaimName"]
        for c in (pod.get("spec") or {}).get("resourceClaims") or []
        if c.get("resourceClaimName")
    ]
    for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if entry.get("resourceClaimName"):
            names.append(entry["resourceClaimName"])
    return names


def release_claims(api: KubeApi, pod: Mapping[str, Any], cache: Informer | None = None) -> None:
    """The pod leaves its claims' reservedFor. As Kubernetes's resourceclaim controller does,
    a claim with the built-in finalizer that no one holds any more is deallocated and the
    finalizer removed; a claim aipaas created for its tasks is then deleted."""
    namespace, uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
    for name in pod_claim_names(pod):

        def write(claim: Claim, name: str = name) -> Claim | None:
            status = dict(claim.get("status") or {})
            reserved = status.get("reservedFor") or []
            kept = [r for r in reserved if r.get("uid") != uid]
            meta = claim["metadata"]
            builtin = m.CLAIM_FINALIZER in (meta.get("finalizers") or [])
            if len(kept) != len(reserved) or (not kept and builtin and status.get("allocation")):
                status["reservedFor"] = kept
                if not kept and builtin:
                    status.pop("allocation", None)
                claim = api.replace_status({**claim, "status": status})
            if kept or not builtin:
                return claim
            finalizers = [
                f for f in claim["metadata"].get("finalizers") or [] if f != m.CLAIM_FINALIZER
            ]
            patch = {
                "resourceVersion": claim["metadata"]["resourceVersion"],
                "finalizers": finalizers or None,
            }
            claim = api.patch("ResourceClaim", name, {"metadata": patch}, namespace)
            if (meta.get("labels") or {}).get(m.MANAGED_LABEL) == "true":
                api.delete("ResourceClaim", name, namespace)
                if cache is not None:
                    cache.forget(namespace, name)
                return None
            return claim

        try:
            _retry(api, namespace, name, write, cache)
        except LookupError:
            continue  # gone already
