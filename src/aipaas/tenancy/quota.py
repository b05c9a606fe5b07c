"""Quota checks for admission: does a job fit what its tenant and queue may still use?"""

from __future__ import annotations

from dataclasses import dataclass

from aipaas.api.resources import Amounts, Quota


@dataclass(frozen=True)
class Usage:
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_milli: int = 0  # whole GPUs count 1000 each

    @classmethod
    def of(cls, amounts: Amounts) -> Usage:
        return cls(amounts.cpu_milli, amounts.memory_mib, amounts.gpu_count * amounts.gpu_milli)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.cpu_milli + other.cpu_milli,
            self.memory_mib + other.memory_mib,
            self.gpu_milli + other.gpu_milli,
        )


def exceeded(quota: Quota, used: Usage, wanted: Usage) -> str | None:
    """Why ``wanted`` on top of ``used`` breaks ``quota``; None when it fits."""
    checks = (
        ("gpu", quota.gpu_milli(), used.gpu_milli, wanted.gpu_milli, 1000, ""),
        ("cpu", quota.cpu_milli(), used.cpu_milli, wanted.cpu_milli, 1000, ""),
        ("memory", quota.memory_mib(), used.memory_mib, wanted.memory_mib, 1, "Mi"),
    )
    for resource, limit, in_use, want, unit, suffix in checks:
        if limit is None:
            continue
        if in_use + want > limit:
            return (
                f"{resource}: needs {_fmt(want, unit)}{suffix}, "
                f"{_fmt(in_use, unit)}{suffix} of {_fmt(limit, unit)}{suffix} in use"
            )
    return None


def _fmt(value: int, unit: int) -> str:
    if value % unit == 0:
        return str(value // unit)
    return f"{value / unit:g}"
