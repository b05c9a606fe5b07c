"""``-o table``: the outputs of ``simulate cycle`` and ``simulate run`` for people."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def _amounts(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {_short(k, v)}" for k, v in values.items()) or "-"


def _short(name: str, value: Any) -> str:
    if name in ("memory", "gpuMemory") and isinstance(value, int):
        return f"{value / 2**30:g}Gi"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _queues(queues: dict[str, Any], columns: tuple[str, ...]) -> Table:
    table = Table(title="queues")
    table.add_column("queue")
    for column in columns:
        table.add_column(column.replace("_", " "))
    for key, entry in queues.items():
        table.add_row(key, *(_amounts(entry[c]) for c in columns))
    return table


def cycle_tables(result: dict[str, Any]) -> list[Table]:
    jobs = Table(title="jobs after the cycle")
    for column in ("job", "phase", "running", "started", "evicted", "why"):
        jobs.add_column(column)
    for key, entry in result["jobs"].items():
        why = entry.get("reason", "")
        if "reservation" in entry:
            reservation = entry["reservation"]
            why = (
                f"{why} (reserved at {reservation['start']:g} on {','.join(reservation['nodes'])})"
            )
        jobs.add_row(
            key,
            entry["phase"],
            " ".join(f"{t}@{entry['nodes'].get(t, '?')}" for t in entry["running"]) or "-",
            " ".join(entry["started"]) or "-",
            " ".join(entry["evicted"]) or "-",
            why or "-",
        )
    columns = ("guaranteed", "quota", "fair_share", "allocated", "pending", "borrowed")
    return [jobs, _queues(result["queues"], columns)]


def run_tables(result: dict[str, Any]) -> list[Table]:
    jobs = Table(title=f"jobs at {result['end']:g}s ({result['cycles']} cycles)")
    for column in ("job", "phase", "submitted", "started", "finished", "evictions", "reason"):
        jobs.add_column(column)
    for key, entry in result["jobs"].items():
        jobs.add_row(
            key,
            entry["phase"],
            *(
                "-" if entry[c] is None else f"{entry[c]:g}"
                for c in ("submitted", "started", "finished")
            ),
            str(entry["evictions"]),
            " ".join(w for w in (entry["reason"], entry.get("message", "")) if w) or "-",
        )
    queues = Table(title="queues")
    for column in ("queue", "GPU-seconds", "CPU-seconds"):
        queues.add_column(column)
    for key, entry in result["queues"].items():
        queues.add_row(key, f"{entry['gpu_seconds']:g}", f"{entry['cpu_seconds']:g}")
    return [jobs, queues]
