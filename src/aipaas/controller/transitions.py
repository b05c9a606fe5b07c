"""Transitions of a task record that the cycle's steps share, as pure functions: each takes a
record and the moment, and returns the new record with the stop it asks for (if any). The
steps hand the stops forward (``Plan.stops``, controller/plan.py); only the controller sends
them, fenced, after the write-back (controller/cycle.py ``send_stops``).

Pure: no store, no backend. Who calls it: controller/cycle.py, admission.py, batch_cycle.py
and device_taint_eviction.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from aipaas.api.job import TaskPhase
from aipaas.controller.work import ACTIVE
from aipaas.store import TaskRecord


@dataclass(frozen=True, slots=True)
class Stop:
    """An attempt to stop: its request id, and how long its SIGTERM waits (an evicted
    service replica drains first; 0 for every other stop)."""

    request_id: str
    drain_seconds: float = 0.0


def given_up(
    record: TaskRecord, phase: TaskPhase, message: str, now: datetime
) -> tuple[TaskRecord, Stop | None]:
    """An attempt the controller no longer counts on: ended with ``phase``, and ``stopping``
    (holding its resources, blocking any replacement) until the backend confirms it stopped;
    the stop is asked only of an attempt that was started (has a request id)."""
    changed = record.with_(
        phase=phase.value,
        message=message,
        finished_at=record.finished_at or now,
        stopping=bool(record.request_id) or record.stopping,
    )
    return changed, Stop(record.request_id) if record.request_id else None


def evicted(
    record: TaskRecord, message: str, now: datetime, drain_seconds: float
) -> tuple[TaskRecord, Stop | None]:
    """A task stopped for a preemptor (or a device taint): back to Pending, its attempt not
    counted against backoffLimit (``evictions``). A running attempt keeps its resources
    (``stopping``) until the backend confirms; one waiting to restart on its node frees the
    node at once (nothing runs there)."""
    changed = record.with_(
        phase=TaskPhase.PENDING.value, message=message, restart_after=None, exit_code=None
    )
    if record.phase in ACTIVE and record.request_id:
        changed = changed.with_(
            stopping=True,
            finished_at=record.finished_at or now,
            evictions=record.evictions + 1,
        )
        return changed, Stop(record.request_id, drain_seconds)
    return changed.with_(node=None, node_index=None, gpus=(), gpu_milli=0), None
