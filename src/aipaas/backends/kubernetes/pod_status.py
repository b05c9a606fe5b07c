"""A task's state read from its pod (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from typing import Any

from aipaas.backends.base import TaskState, TaskStatus
from aipaas.backends.kubernetes.manifests import MANAGED_LABEL, REQUEST_ANNOTATION


def _age_order(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))


def request_of(pod: Mapping[str, Any]) -> str | None:
    """The request id of an aipaas task pod (the Pod informer's index), None for others'."""
    meta = pod.get("metadata") or {}
    rid = (meta.get("annotations") or {}).get(REQUEST_ANNOTATION)
    if rid and (meta.get("labels") or {}).get(MANAGED_LABEL) == "true":
        return str(rid)
    return None


def tasks_by_request(pods: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """aipaas's task pods by request id. Where several pods claim one id, the oldest is the
    task's: a copy can only be made by someone who saw the id, after aipaas's pod existed (so
    no one can make aipaas read a task's state, or leave a pod uncounted, with a pod of their
    own)."""
    out: dict[str, dict[str, Any]] = {}
    for pod in sorted(pods, key=_age_order, reverse=True):
        rid = request_of(pod)
        if rid is not None:
            out[rid] = dict(pod)  # the oldest is written last
    return out


def exit_code(pod: Mapping[str, Any]) -> int | None:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode") is not None:
            return int(terminated["exitCode"])
    return None


def ended(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def task_status(request_id: str, pod: Mapping[str, Any], nodes: Set[str]) -> TaskStatus:
    """Succeeded/Failed from the pod's phase and its container's exit code (a failed pod
    without one, evicted or killed, is LOST); a pod on a node that is gone is LOST; phase
    Unknown (its node stopped reporting) is UNREACHABLE; anything else runs."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    node = (pod.get("spec") or {}).get("nodeName")
    reason = status.get("reason") or status.get("message") or ""
    if phase == "Succeeded":
        return TaskStatus(request_id, TaskState.SUCCEEDED, exit_code(pod) or 0)
    if phase == "Failed":
        code = exit_code(pod)
        if code is None:
            return TaskStatus(request_id, TaskState.LOST, None, f"pod failed: {reason}".strip())
        return TaskStatus(request_id, TaskState.FAILED, code, reason)
    if node and node not in nodes:
        return TaskStatus(request_id, TaskState.LOST, None, f"node {node} is gone")
    if phase == "Unknown":
        return TaskStatus(request_id, TaskState.UNREACHABLE, None, f"node {node} does not report")
    return TaskStatus(request_id, TaskState.RUNNING)
