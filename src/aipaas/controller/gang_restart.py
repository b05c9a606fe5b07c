"""A job that restarts as a gang (``spec.restartPolicy: OnFailure`` of the job): when a task
fails past its own restart policy, every task of the job is stopped (one SIGTERM, then the
job's grace period) and started again together, on the nodes it had, at most
``spec.backoffLimit`` times for the whole job.

The semantics are JobSet's ``failurePolicy`` (any failed child restarts the whole set, counted
once in ``status.restarts`` against ``maxRestarts``) and PyTorchJob's ``runPolicy.backoffLimit``
(one count for the job, not one per replica), with the per-task policy kept in front of it as a
PyTorchJob's replica ``restartPolicy`` is: a task with ``restartPolicy: OnFailure`` restarts
alone while its own ``backoffLimit`` lasts; its failure past it (or any failure of a task that
does not restart alone) restarts the gang. An eviction (preemption, reclaim) is no failure and
counts nowhere.

The count lives in the job's ``status.restarts``. A gang restart is not an attempt the task
spent: each restarted record's ``evictions`` grows with its ``attempt``, so ``attempt -
evictions`` still counts only its own restarts.

A restarted task waits for the whole gang: none of the job's tasks starts again while any of
them is still stopping (an old rank would otherwise still hold the rendezvous port, or write
a checkpoint the new ranks read half-written). Until then the ``restart_after`` of every
waiting task is moved on to one time (``held``), so the scheduler does not take one for a
task to place anew and all become due in the same cycle; the cycle then marks them all
Starting before it asks the backend to start any (a backend that reserves a gang at once sees
all of them).

Pure: records in, records out. Who calls it: controller/cycle.py (``_advance``, step 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from aipaas.api.job import Job, RestartPolicy, TaskPhase
from aipaas.controller.launch import task_spec
from aipaas.controller.lifecycle import Event, Facts, Transition, apply
from aipaas.store import TaskRecord

#: the phases of a task that failed (an exit code other than 0, or lost with its node)
FAILED = (TaskPhase.FAILED.value, TaskPhase.LOST.value)


@dataclass(frozen=True, slots=True)
class GangRestart:
    """What restarting the gang changes: the records' transitions (a running task's asks to
    stop it), the job's restart count after it, and why (for the event)."""

    moves: tuple[Transition, ...]
    restarts: int
    delay_seconds: float
    message: str


def failed_past_own_policy(job: Job, records: Sequence[TaskRecord]) -> list[TaskRecord]:
    """The failed tasks that their own ``restartPolicy`` does not restart (Never, or its
    ``backoffLimit`` spent): each is a failure of the gang."""
    out = []
    for record in records:
        if record.phase not in FAILED:
            continue
        spec = task_spec(job, record.group_name)
        own = record.attempt - record.evictions
        if spec.restart_policy is RestartPolicy.ON_FAILURE and own < spec.backoff_limit:
            continue  # it restarts alone (controller/cycle.py's per-task path)
        out.append(record)
    return out


def restart(
    records: Sequence[TaskRecord],
    failed: Sequence[TaskRecord],
    *,
    restarts: int,
    now: datetime,
    backoff_seconds: float,
    backoff_max_seconds: float,
) -> GangRestart:
    """Restart every placed task of the job after ``failed``: running ones are stopped, ended
    ones wait, all of them Pending on their node until ``restart_after`` (backoff doubling
    with the job's restarts). A task never placed (an elastic extra still waiting, an evicted
    one) is left as it is: the scheduler places it as before."""
    delay = min(backoff_seconds * 2**restarts, backoff_max_seconds)
    after = now + timedelta(seconds=delay)
    names = ", ".join(r.name for r in failed)
    failed_names = {r.name for r in failed}
    why = "; ".join(_failure(r) for r in failed)
    moves: list[Transition] = []
    for record in records:
        if record.node is None or (
            record.phase == TaskPhase.PENDING.value and record.restart_after is None
        ):
            continue  # not placed: nothing of it runs or waits on a node
        message = (
            f"restarts the gang: {why}"
            if record.name in failed_names
            else f"restarts with its gang: {why}"
        )
        # lifecycle.py GANG_RESTART: a running task is stopped, every task waits on its node
        # (its ``evictions`` count: not an attempt the task spent)
        moves.append(apply(record, Event.GANG_RESTART, Facts(now, message, restart_after=after)))
    return GangRestart(
        moves=tuple(moves),
        restarts=restarts + 1,
        delay_seconds=delay,
        message=f"{names} failed: the job restarts as a gang in {delay:g}s ({why})",
    )


def gang_failure(failed: Sequence[TaskRecord], restarts: int, limit: int) -> str:
    """Why the job fails when its gang may not restart again."""
    why = "; ".join(_failure(r) for r in failed)
    return f"{why}, after {restarts} restarts of the gang (spec.backoffLimit {limit})"


def held(records: Sequence[TaskRecord], now: datetime, wait_seconds: float) -> list[TaskRecord]:
    """While one of the job's tasks is still stopping and another is due to restart: every
    task waiting to restart, with ``restart_after`` moved to the same time ``wait_seconds``
    on, so that all of them become due in one cycle and start together (empty: none is due,
    or nothing is stopping and the gang may start)."""
    waiting = [
        r for r in records if r.phase == TaskPhase.PENDING.value and r.restart_after is not None
    ]
    if not any(r.stopping for r in records) or not any(
        r.restart_after is not None and r.restart_after <= now for r in waiting
    ):
        return []
    later = now + timedelta(seconds=wait_seconds)
    return [r.with_(restart_after=later) for r in waiting]


def _failure(record: TaskRecord) -> str:
    text = f"{record.name} {record.phase.lower()}"
    if record.exit_code is not None:
        text += f" with exit code {record.exit_code}"
    return text
