"""Explanations in words and numbers for jobs that wait (item 8 of issue 11).

Every message names the queue node or domain it is about and the amounts that decided, in the
units people read (GPUs, CPUs, MiB), so that a waiting job's status answers "why" without a
look at the scheduler's state.
"""

from __future__ import annotations

from aipaas.scheduler.batch.model import QueueNode, Resources
from aipaas.scheduler.framework.types import Unschedulable

_UNITS = (
    ("gpu", 1000, "GPUs"),
    ("cpu", 1000, "CPUs"),
    ("memory", 1, "MiB"),
    ("gpuMemory", 1, "MiB"),
)


def amount(value: int, unit: int) -> str:
    return str(value // unit) if value % unit == 0 else f"{value / unit:g}"


def what(key: str) -> str:
    """'tenant t' or 'queue t/q' (the cluster for the root)."""
    if key == "":
        return "the cluster"
    return f"tenant {key}" if "/" not in key else f"queue {key}"


def describe(resources: Resources) -> str:
    """'4 GPUs, 16 CPUs, 65536 MiB memory' (zero amounts left out; 'nothing' when empty)."""
    parts = []
    for (name, unit, label), value in zip(_UNITS, resources.as_tuple(), strict=True):
        if value:
            suffix = f" {name}" if label == "MiB" else ""
            parts.append(f"{amount(value, unit)} {label}{suffix}")
    return ", ".join(parts) or "nothing"


def quota_message(key: str, queue: QueueNode, held: Resources, extra: Resources) -> str:
    """'queue t/research is at its quota of 8 GPUs (gpu: holds 8, needs 2 more)'."""
    kind = "tenant" if "/" not in key else "queue"
    for (name, unit, label), used, want, limit in zip(
        _UNITS, held.as_tuple(), extra.as_tuple(), queue.quota.as_tuple(), strict=True
    ):
        if used + want > limit:
            return (
                f"{kind} {key} is at its quota of {amount(limit, unit)} {label} "
                f"({name}: holds {amount(used, unit)}, needs {amount(want, unit)} more)"
            )
    return f"{kind} {key} has room"


def user_quota_message(user: str, quota: Resources, held: Resources, extra: Resources) -> str:
    """'user ana quota: 4 GPUs reached (gpu: holds 4, needs 1 more)' for ``user``
    "t/ana" (a User's spec.quota inside its tenant)."""
    who = user.partition("/")[2]
    for (name, unit, label), used, want, limit in zip(
        _UNITS, held.as_tuple(), extra.as_tuple(), quota.as_tuple(), strict=True
    ):
        if used + want > limit:
            return (
                f"user {who} quota: {amount(limit, unit)} {label} reached "
                f"({name}: holds {amount(used, unit)}, needs {amount(want, unit)} more)"
            )
    return f"user {who} has room"


def over_quota_message(key: str, queue: QueueNode, gang: Resources, tasks: int) -> str:
    """The gang alone is larger than a quota: it can never start while the quota stays."""
    for (name, unit, label), want, limit in zip(
        _UNITS, gang.as_tuple(), queue.quota.as_tuple(), strict=True
    ):
        if want > limit:
            return (
                f"its gang of {tasks} task{'s' if tasks != 1 else ''} needs "
                f"{amount(want, unit)} {label} ({name}), more than the quota of {what(key)} "
                f"({amount(limit, unit)} {label}); it cannot start unless the quota grows"
            )
    return f"{what(key)} has room"


def capacity_message(gang: Resources, capacity: Resources) -> str:
    """The gang is larger than the whole cluster."""
    for (name, unit, label), want, have in zip(
        _UNITS[:3], gang.as_tuple()[:3], capacity.as_tuple()[:3], strict=True
    ):
        if want > have:
            return (
                f"its gang needs {amount(want, unit)} {label} ({name}); the whole cluster "
                f"has {amount(have, unit)}"
            )
    return "the cluster can hold its gang"


def fair_share_message(key: str, share: Resources, held: Resources, extra: Resources) -> str:
    """'fair share of queue t/a is 6 GPUs and it holds 6; the job needs 2 more'."""
    for (name, unit, label), fair, used, want in zip(
        _UNITS, share.as_tuple(), held.as_tuple(), extra.as_tuple(), strict=True
    ):
        if want > 0 and used + want > fair:
            suffix = f" {name}" if label == "MiB" else ""
            return (
                f"fair share of {what(key)} is {amount(fair, unit)} {label}{suffix} and it "
                f"holds {amount(used, unit)}; the job needs {amount(want, unit)} more"
            )
    return f"{what(key)} is within its fair share"


def unschedulable_message(result: Unschedulable, tasks: int) -> str:
    """The placement engine's words for a gang (or one task) that found no room."""
    detail = "; ".join(result.reasons) or "no node has room"
    if tasks == 1:
        return f"no room for it now: {detail}"
    return f"no room for its gang of {tasks} tasks now: {detail}"
