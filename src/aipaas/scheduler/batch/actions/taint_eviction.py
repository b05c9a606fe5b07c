"""Tasks on nodes with a NoExecute taint they do not tolerate are evicted, as Kubernetes' taint
manager evicts pods (tolerationSeconds is not waited for).

Who calls it: ``Session.run``, after the profile's actions (the victims stop before their room
is used, as preemption's do, and no action starts them again in the same cycle); the live
controller and ``aipaas simulate`` alike. A cluster without NoExecute taints
costs one look at its nodes. A gang that would run below ``minAvailable`` goes whole (it
cannot run with fewer), like an evicted gang elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aipaas.scheduler.batch.model import Eviction
from aipaas.scheduler.framework.constraints import untolerated
from aipaas.scheduler.framework.types import Placement, Taint

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session

REASON = "NoExecute"
BY = "a NoExecute taint"  # who needed the room, in the words of the eviction's message


def evict_untolerated(session: Session) -> None:
    nodes = session.snapshot.nodes
    tainted = {n.name: n.taints for n in nodes if any(t.effect == REASON for t in n.taints)}
    if not tainted:
        return
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
                hit.append((task, bad[0]))
        if not hit:
            continue
        victims = {task.name: _message(task.placement, taint) for task, taint in hit}
        if len(running) - len(victims) < job.min_available:
            why = f"its gang cannot run without the tasks it loses: {next(iter(victims.values()))}"
            victims = {t.name: victims.get(t.name, why) for t in running}
        for task in running:
            message = victims.get(task.name)
            if message is not None:
                eviction = Eviction(job.key, task.name, BY, REASON, message)
                statement.evict(job, task, eviction)
    statement.commit()


def _message(placement: Placement | None, taint: Taint) -> str:
    node = placement.node if placement is not None else "?"
    value = f"={taint.value}" if taint.value else ""
    return f"node {node} has taint {taint.key}{value}:NoExecute, not tolerated"
