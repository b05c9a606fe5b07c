"""``simulate run``'s record of each job (first start, current run, evictions, why it waits)
and the contract's JSON made from the records (sim/scenario_run.py keeps them)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Record:
    submitted: float
    started: float | None = None  # the first start
    run_start: float | None = None  # the current run's start
    finished: float | None = None
    evictions: int = 0
    tasks_evicted: int = 0
    phase: str = "Pending"
    reason: str = ""  # a code: TimeLimit, Preempted, QuotaExceeded, ...
    message: str = ""  # the same in words and numbers
    generation: int = 0  # bumps on every start and eviction: older end events are void
    #: evicted whole and not started since: (code, message) of the eviction, which the
    #: session's reason for its wait does not replace (issue 11: its status says who evicted
    #: it and why)
    evicted_why: tuple[str, str] | None = None


def run_output(
    records: Mapping[str, Record],
    reasons: dict[str, tuple[str, str]],
    used: Mapping[str, list[float]],
    queues: Mapping[str, object],
    now: float,
    cycles: int,
) -> dict[str, Any]:
    """The contract's JSON; ``reasons`` (the cycles' words not yet written into the records,
    emptied here) are written first. A job evicted whole and waiting again keeps its
    eviction's reason, the wait's words after it."""
    for key, (code, message) in reasons.items():
        record = records[key]
        evicted = record.evicted_why
        if evicted is not None and record.phase == "Pending":
            code, message = evicted[0], f"{evicted[1]}; waiting: {message}"
        record.reason, record.message = code, message
    reasons.clear()
    jobs: dict[str, Any] = {}
    for key, record in records.items():
        jobs[key] = {
            "submitted": time_out(record.submitted),
            "started": time_out(record.started),
            "finished": time_out(record.finished),
            "evictions": record.evictions,
            "tasks_evicted": record.tasks_evicted,
            "phase": record.phase,
            "reason": record.reason,
            "message": record.message,
            "wait": None
            if record.started is None
            else time_out(max(record.started - record.submitted, 0.0)),
        }
    queue_use = {
        key: {"gpu_seconds": time_out(used[key][0]), "cpu_seconds": time_out(used[key][1])}
        for key in sorted(queues)
        if key
    }
    return {"jobs": jobs, "queues": queue_use, "end": time_out(now), "cycles": cycles}


def time_out(value: float | None) -> float | int | None:
    """Whole seconds as ints, else rounded to a microsecond."""
    if value is None:
        return None
    value = round(value, 6)
    return int(value) if math.isclose(value, round(value)) and value == int(value) else value
