"""Tasks on nodes with a NoExecute taint they do not tolerate are evicted, as Kubernetes' taint
manager evicts pods, ``tolerationSeconds`` included.

Kubernetes' semantics (pkg/controller/tainteviction): per NoExecute taint of the node, the
first toleration of the task that tolerates it is the one used. A taint none tolerates: the
task is evicted at once. Otherwise the shortest ``tolerationSeconds`` among the tolerations
used is how long it may stay (0 or less: not at all); none of them has one: it stays for ever.
The time runs from when the task became subject to the taints: the latest of the earliest
NoExecute taint's ``since`` (when it appeared; None: at the session's now) and the task's
start. A task whose time has not run out stays, and ``Decisions.due`` says when the earliest
one does (the live controller runs a session then; ``simulate run`` wakes then).

Who calls it: ``Session.run``, after the profile's actions (the victims stop before their room
is used, as preemption's do, and no action starts them again in the same cycle); the live
controller and ``aipaas simulate`` alike. A cluster without NoExecute taints costs one look at
its nodes. A gang that would run below ``minAvailable`` goes whole (it cannot run with fewer),
like an evicted gang elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.model import Eviction
from aipaas.scheduler.framework.constraints import tolerates, untolerated
from aipaas.scheduler.framework.types import Placement, Taint, Toleration

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session

REASON = "NoExecute"
BY = "a NoExecute taint"  # who needed the room, in the words of the eviction's message


def evict_untolerated(session: Session) -> None:
    nodes = session.snapshot.nodes
    tainted = {n.name: n.taints for n in nodes if any(t.effect == REASON for t in n.taints)}
    if not tainted:
        return
    now = session.now
    due: float | None = None
    statement = session.statement()
    for job in session.jobs.values():
        running = [t for t in job.tasks if t.placement is not None and t.placement.node_index >= 0]
        hit = []
        for task in running:
            assert task.placement is not None
            taints = tainted.get(task.placement.node)
            if not taints:
                continue
            constraints = task.request.constraints
            tolerations = constraints.tolerations if constraints is not None else ()
            bad = untolerated(taints, tolerations, (REASON,))
            if bad:
                hit.append((task, _message(task.placement, bad[0], None)))
                continue
            ends = tolerated_until(taints, tolerations, task.since, now)
            if ends is None:
                continue
            if ends <= now:
                first = next(t for t in taints if t.effect == REASON)
                hit.append((task, _message(task.placement, first, ends)))
            elif due is None or ends < due:
                due = ends
        if not hit:
            continue
        victims = {task.name: message for task, message in hit}
        if len(running) - len(victims) < job.min_available:
            why = f"its gang cannot run without the tasks it loses: {next(iter(victims.values()))}"
            victims = {t.name: victims.get(t.name, why) for t in running}
        for task in running:
            message = victims.get(task.name)
            if message is not None:
                eviction = Eviction(job.key, task.name, BY, REASON, message)
                statement.evict(job, task, eviction)
    statement.commit()
    session.decisions.due = due


def tolerated_until(
    taints: Sequence[Taint], tolerations: Sequence[Toleration], since: float | None, now: float
) -> float | None:
    """When a task that tolerates every NoExecute taint of ``taints`` must go (None: never),
    by Kubernetes' rule (module docstring). ``since``: when the task started."""
    used = []
    appeared: list[float] = []
    for taint in taints:
        if taint.effect != REASON:
            continue
        toleration = next((o for o in tolerations if tolerates(o, taint)), None)
        if toleration is None:
            return now  # not tolerated: at once (untolerated() says so first)
        used.append(toleration)
        appeared.append(now if taint.since is None else taint.since)
    limits = [o.seconds for o in used if o.seconds is not None]
    if not limits:
        return None
    shortest = min(limits)
    start = max(min(appeared), since if since is not None else now)
    return start + max(shortest, 0)


def _message(placement: Placement | None, taint: Taint, ended: float | None) -> str:
    node = placement.node if placement is not None else "?"
    value = f"={taint.value}" if taint.value else ""
    if ended is None:
        return f"node {node} has taint {taint.key}{value}:NoExecute, not tolerated"
    return (
        f"node {node} has taint {taint.key}{value}:NoExecute, tolerated until "
        f"{ended:g} (tolerationSeconds)"
    )
