"""The backfill action (EASY, as Slurm's backfill scheduler): after allocate, preempt and
reclaim, jobs still waiting for room get one more chance to start in the gaps, without
delaying any reservation (batch/reservations.py says where each may go).

1. Reservations are worked out again on the cluster as it is now: preemption and reclaim may
   have freed room (or started a reserved job).
2. In the session's order, every pending gang that waits for room, or behind the first job
   that could not start in strict order (Slurm's main scheduler, which backfill follows), or
   that no action looked at yet, is tried as allocate tries it: quota and fair share first,
   then a placement on the nodes ``allowed_nodes`` leaves it. The first one of each queue that
   cannot start gets a reservation (allocate's ``start_gang`` asks for it); later ones must
   keep clear of it. One that would start now but for a reservation waits with reason
   Reserved too: "n3-n6 are reserved for t/big from t=5400s; it fits there now but has no time
   limit" (or "would run until t=9000s"). A gang refused for fair share (allocate's borrowing
   found no room either) is not tried again but may be reserved: for when its queue is back
   within its share and the room is there.
3. Every job holding a reservation waits with reason Reserved: "reserved: starts at t=5400s on
   n3-n6".

A job held back for its queue's head (head_hold.py) whose head has started since (preempt made
its room) is held no longer and is tried as any other: it would otherwise wait a cycle with the
words "... which waits" about a head that runs.

Jobs waiting for quota or other reasons are left as they are: backfill fills gaps in the
cluster, it does not lend capacity (allocate's borrowing pass does that). Except after
evictions: preempt and reclaim lower what queues hold, so a job refused earlier in the cycle for
its quota or its fair share may be within them now ("tenant t holds 10 of 8" no longer true):
such a job is tried again as any other, and one still refused gets the words with today's
numbers. (Without evictions holdings only grow in a cycle: those refusals stand.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from aipaas.scheduler.batch.actions.allocate import NO_ROOM, STARTED, Placer, start_gang
from aipaas.scheduler.batch.model import Job, Reservation, Resources, Task
from aipaas.scheduler.batch.ordering import ordered
from aipaas.scheduler.batch.session import gang_tasks
from aipaas.scheduler.batch.topology import Refusal, place_in_domain
from aipaas.scheduler.framework.types import Placement, Unschedulable

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session

#: Reason codes of a job that waits for room in the cluster (not for policy).
ROOM_REASONS: Final = frozenset({"Unschedulable", "Topology", "Reserved", "Gang"})
#: Strict order (Slurm's main scheduler) holds jobs behind the first that cannot start;
#: backfill lets them through where they delay no reservation, as Slurm's backfill does.
BEHIND_REASONS: Final = frozenset({"StrictOrder"})
#: ... and of one that waits for its fair share too: it may hold a reservation, not start.
RESERVING_REASONS: Final = ROOM_REASONS | BEHIND_REASONS | {"FairShare"}
#: Refusals for a queue's limits: they stand in a cycle unless evictions lowered the holdings.
LIMIT_REASONS: Final = frozenset({"FairShare", "QuotaExceeded"})
#: Below this the clock is virtual (seconds since a scenario's start), not epoch seconds.
VIRTUAL_CLOCK_LIMIT: Final = 1e9


def backfill(session: Session) -> None:
    reservations = session.reservations
    reservations.refresh()
    placer = Placer(session)
    fair_share = session.policy.queue_order.limits_allocation
    memo: dict[tuple[object, ...], bool] = {}
    jobs, why, enqueued = session.jobs, session.waiting, session.enqueued
    unlooked = ("Unschedulable", "")
    gangs = session.pending_gangs()
    evicted = bool(session.decisions.evicted)
    tried = RESERVING_REASONS | LIMIT_REASONS if evicted else RESERVING_REASONS
    held_by = session.memos.held_by
    waiting = [  # the jobs with a gang to start; the cheap test first: most of a backlog
        # waits for policy, not room
        jobs[key]
        for key in gangs
        if (
            why.get(key, unlooked)[0] in tried
            # held for a head that has started since (preempt made its room): held no longer
            or (held_by.get(key, key) not in gangs and why[key][0] == "HeldForHead")
        )
        and (enqueued is None or key in enqueued)  # session.considered
    ]
    heads = {head for head in held_by.values() if head in gangs}
    for job in ordered(session, waiting):
        reason = session.waiting.get(job.key, ("", ""))[0]
        if reason in LIMIT_REASONS and not _within_limits_now(session, job, reason, evicted, gangs):
            if reason == "FairShare":
                # Refused for fair share and, borrowing, for room: it starts when both allow.
                reservations.reserve(job)
            continue
        _try(session, placer, job, fair_share, memo)
    # Heads that started just now, in this loop: the jobs they held may go too.
    started_heads = {head for head in heads if head not in gangs}
    if started_heads:
        freed = [
            jobs[key]
            for key, head in held_by.items()
            if head in started_heads and key in gangs and why[key][0] == "HeldForHead"
        ]
        for job in ordered(session, freed):
            _try(session, placer, job, fair_share, memo)
    for reservation in reservations.held.values():
        job = session.jobs[reservation.job]
        session.wait(job, "Reserved", reservation_message(reservation, session.now))


def _try(
    session: Session,
    placer: Placer,
    job: Job,
    fair_share: bool,
    memo: dict[tuple[object, ...], bool],
) -> None:
    """Start the job's gang where it delays no reservation, else say why it waits."""
    reservations = session.reservations
    outcome = start_gang(session, placer, job, fair_share=fair_share)
    if outcome == STARTED:
        reservations.drop(job.key)
    elif outcome == NO_ROOM and job.key not in reservations.held:
        note = held_back(session, job)
        if note is not None and fits_unrestricted(session, job, memo):
            session.wait(job, "Reserved", note)


def _within_limits_now(
    session: Session,
    job: Job,
    reason: str,
    evicted: bool,
    gangs: dict[str, tuple[list[Task], Resources]],
) -> bool:
    """After evictions, whether a job refused for quota or fair share earlier in the cycle is
    within them now; when it is not, its words are said again with today's numbers."""
    if not evicted:
        return False
    need = gangs[job.key][1]
    if reason == "QuotaExceeded":
        problem = session.quota_problem(job, need)
    else:
        problem = session.fair_share_problem(job, need)
    if problem is None:
        return True
    session.wait(job, reason, problem)
    return False


def held_back(session: Session, job: Job) -> str | None:
    """Words for a job kept off reserved nodes: 'n3-n6 are reserved for t/big from t=5400s;
    it fits there now but has no time limit' (None when no reservation holds it back)."""
    reservations = session.reservations
    if reservations.allowed_nodes(job) is None:
        return None
    end = reservations.expected_end(job)
    now = session.now
    held = [r for r in reservations.held.values() if end > r.start]
    where = "; ".join(
        f"{compress_nodes(r.nodes)} {'is' if len(r.nodes) == 1 else 'are'} reserved for "
        f"{r.job} from {when(r.start, now)}"
        for r in held
    )
    tail = "has no time limit" if end == math.inf else f"would run until {when(end, now)}"
    return f"{where}; it fits there now but {tail}"


def fits_unrestricted(session: Session, job: Job, memo: dict[tuple[object, ...], bool]) -> bool:
    """Would the job's gang start now if no reservation held nodes back? (A trial placement,
    given back at once; remembered per gang shape until something starts.)"""
    tasks = gang_tasks(job)
    pods = [task.request for task in tasks]
    # Claims that are whole GPUs by another name (``Task.fit``) place as their count does.
    shapes = [task.fit or task.request for task in tasks]
    if any(p.claims for p in shapes):
        return False
    constraint = getattr(session.engine, "constraint", None)
    key = (
        tuple(p.fit_key for p in shapes),
        job.topology_required,
        len(session.decisions.started),
        constraint(pods) if constraint is not None else None,
    )
    known = memo.get(key)
    if known is not None:
        return known
    engine = session.engine
    placed: list[Placement] | Refusal | Unschedulable
    if job.topology_required is not None:
        placed = place_in_domain(engine, pods, job.topology_required, None, required=True)
    else:
        placed = engine.place(pods)
    fits = isinstance(placed, list)
    if isinstance(placed, list):
        for placement in placed:
            engine.release(placement)
    memo[key] = fits
    return fits


def when(start: float, now: float) -> str:
    """'t=5400s' on a virtual clock (``now`` below 10^9), else '14:05 UTC'."""
    if now < VIRTUAL_CLOCK_LIMIT:
        return f"t={int(start)}s" if float(start).is_integer() else f"t={start:.1f}s"
    return datetime.fromtimestamp(start, UTC).strftime("%H:%M UTC")


def _split(name: str) -> tuple[str, int | None]:
    """('n', 12) for 'n12'; (name, None) without a trailing number."""
    digits = len(name) - len(name.rstrip("0123456789"))
    if digits == 0:
        return name, None
    return name[:-digits], int(name[-digits:])


def compress_nodes(names: Sequence[str]) -> str:
    """'n3-n6' for n3, n4, n5, n6; runs of consecutive numbers under one prefix are joined,
    everything else listed with commas, in the order given."""
    runs: list[list[str]] = []
    last: tuple[str, int] | None = None
    for name in names:
        prefix, number = _split(name)
        if number is not None and last is not None and last == (prefix, number - 1) and runs:
            runs[-1].append(name)
        else:
            runs.append([name])
        last = (prefix, number) if number is not None else None
    return ",".join(r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def reservation_message(reservation: Reservation, now: float) -> str:
    """'reserved: starts at t=5400s on n3-n6'."""
    return f"reserved: starts at {when(reservation.start, now)} on " + compress_nodes(
        reservation.nodes
    )
