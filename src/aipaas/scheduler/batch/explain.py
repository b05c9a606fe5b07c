"""Explanations in words and numbers for jobs that wait (item 8 of issue 11)."""

from __future__ import annotations

from aipaas.scheduler.batch.model import QueueNode, Resources

_UNITS = (
    ("gpu", 1000, "GPUs"),
    ("cpu", 1000, "CPUs"),
    ("memory", 1, "MiB"),
    ("gpuMemory", 1, "MiB"),
)


def amount(value: int, unit: int) -> str:
    return str(value // unit) if value % unit == 0 else f"{value / unit:g}"


def quota_message(key: str, queue: QueueNode, held: Resources, extra: Resources) -> str:
    """'queue t/research is at its quota of 8 GPUs (holds 8, needs 2 more)'."""
    what = "tenant" if "/" not in key else "queue"
    for (name, unit, label), used, want, limit in zip(
        _UNITS, held.as_tuple(), extra.as_tuple(), queue.quota.as_tuple(), strict=True
    ):
        if used + want > limit:
            return (
                f"{what} {key} is at its quota of {amount(limit, unit)} {label} "
                f"({name}: holds {amount(used, unit)}, needs {amount(want, unit)} more)"
            )
    return f"{what} {key} has room"
