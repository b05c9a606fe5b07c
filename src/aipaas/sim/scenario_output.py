"""``aipaas simulate cycle``: one session over the scenario's state, and its decisions as JSON.

The output (issue 11's contract)::

    {"jobs": {"t/a1": {"phase": "Running|Pending|Evicted", "running": [...], "evicted": [...],
                       "started": [...], "nodes": {task: node}, "reason": "...",
                       "reason_code": "...", "reservation": {...} when it has one}},
     "evicted": ["t/a1/w-3"], "started": ["t/b1/w-0"], "reservations": {job: {...}},
     "queues": {"t/a": {"guaranteed": {...}, "quota": {...}, "fair_share": {...},
                        "allocated": {...}, "pending": {...}, "borrowed": {...}}}}

Phase "Evicted": a job that ran before the cycle and none of whose tasks runs after it, having
lost some this cycle. Units (COMMON.md): gpu in GPUs and cpu in cores (int when whole), memory
and gpuMemory in bytes; every resource dict has gpu, and cpu, memory or gpuMemory only when some
queue has a non-zero amount of it. Quotas list only their bounded resources.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aipaas.scheduler.batch.model import (
    RESOURCE_NAMES,
    UNBOUNDED,
    Decisions,
    Eviction,
    Job,
    QueueReport,
    Reservation,
    Resources,
    Snapshot,
)
from aipaas.scheduler.batch.run import run_session
from aipaas.sim.scenario_build import Scenario

MIB = 2**20
#: per resource: the model's unit -> the output's (milli -> whole; MiB -> bytes)
_SCALE = {"gpu": 1000, "cpu": 1000, "memory": 1, "gpuMemory": 1}
_REPORT_FIELDS = ("guaranteed", "fair_share", "allocated", "pending", "borrowed")


def number(value: int, name: str) -> int | float:
    """A model amount in the output's unit: GPUs and cores (int when whole), bytes."""
    if name in ("memory", "gpuMemory"):
        return value * MIB
    whole, rest = divmod(value, _SCALE[name])
    return whole if rest == 0 else value / _SCALE[name]


def amounts(resources: Resources, names: Iterable[str], bounded: bool = False) -> dict[str, Any]:
    """``resources`` by name (a quota: only the bounded ones)."""
    values = dict(zip(RESOURCE_NAMES, resources.as_tuple(), strict=True))
    return {
        name: number(values[name], name)
        for name in names
        if not (bounded and values[name] >= UNBOUNDED)
    }


def resource_names(reports: Iterable[QueueReport]) -> list[str]:
    """gpu, then every other resource some report has a non-zero amount of."""
    used = {"gpu"}
    for report in reports:
        for field in _REPORT_FIELDS:
            values = getattr(report, field).as_tuple()
            used.update(n for n, v in zip(RESOURCE_NAMES, values, strict=True) if v)
    return [n for n in RESOURCE_NAMES if n in used]


def queues_output(reports: Mapping[str, QueueReport]) -> dict[str, Any]:
    """Tenants and queues (not the root ""), in key order."""
    shown = {k: r for k, r in reports.items() if k}
    names = resource_names(shown.values())
    out: dict[str, Any] = {}
    for key in sorted(shown):
        report = shown[key]
        out[key] = {
            "guaranteed": amounts(report.guaranteed, names),
            "quota": amounts(report.quota, RESOURCE_NAMES, bounded=True),
            **{f: amounts(getattr(report, f), names) for f in _REPORT_FIELDS[1:]},
        }
    return out


def dependency_waits(scenario: Scenario) -> dict[str, tuple[str, str]]:
    """Pending jobs whose ``dependsOn`` are not done: in one cycle, every dependency is
    unfinished (nothing ends within a cycle)."""
    out = {}
    for key, needs in scenario.depends_on.items():
        if not scenario.jobs[key].is_running:
            out[key] = ("WaitingForDependencies", f"waiting for {', '.join(needs)} to succeed")
    return out


def run_cycle(scenario: Scenario) -> dict[str, Any]:
    """One session over the scenario at ``now``; the decisions as the contract's JSON."""
    jobs = scenario.jobs
    before = {key: [t.name for t in job.tasks if t.running] for key, job in jobs.items()}
    held_back = dependency_waits(scenario)
    snapshot = Snapshot(
        now=scenario.now,
        nodes=scenario.nodes,
        queues=scenario.queues,
        jobs=[job for key, job in jobs.items() if key not in held_back],
        users=scenario.users,
    )
    decisions = run_session(snapshot, scenario.engine, scenario.options)
    decisions.reasons.update(held_back)
    return cycle_output(jobs, before, decisions)


def cycle_output(
    jobs: Mapping[str, Job], before: Mapping[str, list[str]], decisions: Decisions
) -> dict[str, Any]:
    started: dict[str, list[str]] = {}
    for start in decisions.started:
        started.setdefault(start.job, []).append(start.task)
    evicted: dict[str, list[str]] = {}
    evictions: dict[str, Eviction] = {}
    for eviction in decisions.evicted:
        evicted.setdefault(eviction.job, []).append(eviction.task)
        evictions.setdefault(eviction.job, eviction)
    out_jobs: dict[str, Any] = {}
    for key, job in jobs.items():
        running = [t.name for t in job.tasks if t.running]
        if running:
            phase = "Running"
        elif before.get(key) and evicted.get(key):
            phase = "Evicted"
        else:
            phase = "Pending"
        code, message = decisions.reasons.get(key, ("", ""))
        entry: dict[str, Any] = {
            "phase": phase,
            "running": running,
            "evicted": evicted.get(key, []),
            "started": started.get(key, []),
            "nodes": {t.name: t.placement.node for t in job.tasks if t.placement is not None},
            "reason": message,
            "reason_code": code,
        }
        first = evictions.get(key)
        if first is not None:
            entry["evicted_by"] = first.by
            entry["eviction_reason"] = first.reason
            if not message:
                entry["reason"] = first.message
                entry["reason_code"] = first.reason
        reservation = decisions.reservations.get(key)
        if reservation is not None:
            entry["reservation"] = _reservation(reservation)
        out_jobs[key] = entry
    return {
        "jobs": out_jobs,
        "evicted": [f"{e.job}/{e.task}" for e in decisions.evicted],
        "started": [f"{s.job}/{s.task}" for s in decisions.started],
        "reservations": {k: _reservation(r) for k, r in decisions.reservations.items()},
        "queues": queues_output(decisions.queues),
    }


def _reservation(reservation: Reservation) -> dict[str, Any]:
    start = reservation.start
    return {"start": int(start) if start == int(start) else start, "nodes": list(reservation.nodes)}
