"""A headless Service per multi-pod job, so that its ranks find each other by name.

A pod's IP is known only once it runs, and a node's name is not an address a pod can reach; so,
as Kubernetes' JobSet and the training operators do, each pod of a job of several tasks gets
``spec.hostname`` ``rank-<RANK>`` and ``spec.subdomain`` the job's headless Service (no
cluster IP, selecting the job's pods, its not-ready pods published too so that a rendezvous
can begin before any readiness), and cluster DNS answers
``rank-0.<service>.<namespace>.svc.<cluster domain>`` with rank 0's pod IP. MASTER_ADDR and
the rendezvous endpoints (``*RDZV_ENDPOINT``) the controller gave as rank 0's node name are
written as that name.

Level-triggered (``reconcile``, each status call of the backend): a Service is created for
every job with a live pod that names it, and the backend's own Services whose job has no live
pod left (and no start under way: it makes the Service before its pod) are deleted, so a crash
between a start and a stop leaves nothing behind for long.
Who calls it: backends/kubernetes/backend.py (``start`` and ``status``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Container, Mapping
from typing import Any, Final

from aipaas.backends.base import LaunchRequest
from aipaas.backends.kubernetes import manifests as m
from aipaas.backends.kubernetes.api import Conflict, KubeApi

log = logging.getLogger("aipaas.backends.kubernetes")

#: on the Services aipaas makes: which job's pods they select
JOB_SERVICE_LABEL: Final = "aipaas.dev/job-service"
#: the environment variables whose value names rank 0's host (exactly, or as ``host:port``)
_HOST_KEYS: Final = ("MASTER_ADDR",)
_ENDPOINT_SUFFIX: Final = "RDZV_ENDPOINT"
_ENDED: Final = ("Succeeded", "Failed")


def is_multi_pod(env: Mapping[str, str]) -> bool:
    """A task of a job of several tasks (or an elastic one, which may grow to several)."""
    size = env.get("WORLD_SIZE", "1")
    elastic = any(key.endswith(_ENDPOINT_SUFFIX) for key in env)
    return elastic or (size.isdigit() and int(size) > 1)


def service_name(job: str) -> str:
    """The job's headless Service: a DNS-1035 label (it starts with a letter)."""
    name = m.dns_label(job, 50)
    return name if name[0].isalpha() else f"j-{name}"[:50].rstrip("-")


def rank_host(rank: str, job: str, namespace: str, domain: str) -> str:
    return f"rank-{rank}.{service_name(job)}.{namespace}.svc.{domain}"


def with_job_dns(
    manifest: dict[str, Any], request: LaunchRequest, namespace: str, domain: str
) -> dict[str, Any]:
    """The pod of a multi-pod job with its stable DNS name, and rank 0's name where its
    environment names rank 0's node; a pod of a one-task job as it is."""
    if not is_multi_pod(request.env):
        return manifest
    spec = manifest["spec"]
    spec["hostname"] = f"rank-{m.dns_label(request.env.get('RANK', '0'), 20)}"
    spec["subdomain"] = service_name(request.job)
    old = request.env.get("MASTER_ADDR", "")
    if not old:
        return manifest
    host = rank_host("0", request.job, namespace, domain)
    for container in spec["containers"]:
        for item in container.get("env") or []:
            key, value = item["name"], str(item.get("value", ""))
            if key in _HOST_KEYS and value == old:
                item["value"] = host
            elif key.endswith(_ENDPOINT_SUFFIX) and value.startswith(f"{old}:"):
                item["value"] = host + value[len(old) :]
    return manifest


def headless_service(job: str, tenant: str, namespace: str) -> dict[str, Any]:
    name = service_name(job)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {m.MANAGED_LABEL: "true", JOB_SERVICE_LABEL: name},
            "annotations": {"aipaas.dev/job": job, "aipaas.dev/tenant": tenant},
        },
        "spec": {
            "clusterIP": "None",
            "selector": {
                m.MANAGED_LABEL: "true",
                "aipaas.dev/job": m.dns_label(job, 63),
                "aipaas.dev/tenant": m.dns_label(tenant, 63),
            },
            "publishNotReadyAddresses": True,
        },
    }


def ensure(api: KubeApi, service: Mapping[str, Any], known: Container[tuple[str, str]]) -> Any:
    """Create the Service unless it is known (or made meanwhile): the created object, or None."""
    meta = service["metadata"]
    if (meta["namespace"], meta["name"]) in known:
        return None
    with contextlib.suppress(Conflict):
        return api.create(dict(service))
    return None


def _live(pod: Mapping[str, Any]) -> bool:
    return (
        not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in _ENDED
    )


def reconcile(
    api: KubeApi,
    pods: list[dict[str, Any]],
    services: list[dict[str, Any]],
    starting: Container[tuple[str, str]] = (),
) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """Create the Services live pods name and delete aipaas's own that no live pod names and
    no start under way is about to (``starting``: (namespace, name) of those Services):
    (created, deleted as (namespace, name))."""
    wanted: dict[tuple[str, str], dict[str, Any]] = {}
    for pod in pods:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        labels = meta.get("labels") or {}
        if labels.get(m.MANAGED_LABEL) != "true" or not spec.get("subdomain") or not _live(pod):
            continue
        notes = meta.get("annotations") or {}
        job, tenant = notes.get("aipaas.dev/job", ""), notes.get("aipaas.dev/tenant", "")
        if job and service_name(job) == spec["subdomain"]:
            wanted[(meta["namespace"], spec["subdomain"])] = headless_service(
                job, tenant, meta["namespace"]
            )
    have = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in services}
    created = []
    for service in wanted.values():
        made = ensure(api, service, have)
        if made is not None:
            created.append(made)
    deleted = []
    for key in sorted(have.keys() - wanted.keys()):
        if key in starting:
            continue
        try:
            api.delete("Service", key[1], key[0])
        except Exception as err:  # tried again at the next status call
            log.warning("deleting the headless Service %s/%s failed: %s", key[0], key[1], err)
            continue
        deleted.append(key)
    return created, deleted
