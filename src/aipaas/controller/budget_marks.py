"""The budgets' actions in force, as system annotations of queues and tenants.

``stopAdmission`` marks the budget's queue (a queue budget) or its tenant (a tenant budget)
with ``aipaas.dev/admission-stopped``: admission starts no new job there (the batch session
holds its queue node: scheduler/batch/from_api.py). ``lowerPriority`` marks the queue with
``aipaas.dev/priority-lowered``: the queue tree gives it the lowest priority among its siblings
(api/finops.py ``effective_queue_spec``). Each mark's value names the budgets behind it. Users
cannot set or remove ``aipaas.dev/`` annotations (server/submission.py); a mark no budget wants
any longer (a new period, a deleted budget, a raised amount) is lifted.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable

from aipaas.api.finops import ADMISSION_STOPPED, PRIORITY_LOWERED, Budget
from aipaas.api.meta import Object
from aipaas.errors import Conflict, NotFound
from aipaas.metering.budgets import Standing
from aipaas.store import Store

log = logging.getLogger("aipaas.controller")
MARKS = (ADMISSION_STOPPED, PRIORITY_LOWERED)
Target = tuple[str, str, str]  # kind, tenant, name


def wanted_marks(in_force: Iterable[tuple[Budget, Standing]]) -> dict[Target, dict[str, str]]:
    """(kind, tenant, name) -> {annotation: the budgets behind it}."""
    names: dict[Target, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for budget, standing in in_force:
        queue = budget.spec.queue
        target: Target = ("Queue", budget.tenant, queue) if queue else ("Tenant", "", budget.tenant)
        if "stopAdmission" in standing.actions:
            names[target][ADMISSION_STOPPED].add(budget.name)
        if "lowerPriority" in standing.actions and queue:
            names[target][PRIORITY_LOWERED].add(budget.name)
    return {
        target: {mark: ",".join(sorted(who)) for mark, who in marks.items()}
        for target, marks in names.items()
    }


def reconcile(store: Store, in_force: Iterable[tuple[Budget, Standing]]) -> None:
    wanted = wanted_marks(in_force)
    marked: list[Object] = [
        obj
        for kind, scope in (("Queue", None), ("Tenant", ""))
        for obj in store.list_objects(kind, scope)
        if any(mark in obj.metadata.annotations for mark in MARKS)
    ]
    targets = {(o.kind, o.tenant, o.name): o for o in marked}
    for target in wanted:
        if target not in targets:
            found = store.find(target[0], target[1], target[2])
            if found is not None:
                targets[target] = found
    for target, obj in targets.items():
        _mark(store, obj, wanted.get(target, {}))


def _mark(store: Store, obj: Object, marks: dict[str, str]) -> None:
    for _ in range(5):
        annotations = {k: v for k, v in obj.metadata.annotations.items() if k not in MARKS}
        annotations.update(marks)
        if annotations == obj.metadata.annotations:
            return
        meta = obj.metadata.model_copy(update={"annotations": annotations})
        try:
            store.update(
                obj.model_copy(update={"metadata": meta}),
                expected_version=obj.metadata.resource_version,
            )
        except Conflict:
            current = store.find(obj.kind, obj.tenant, obj.name)
            if current is None:
                return
            obj = current
            continue
        except NotFound:
            return
        lifted = sorted(set(MARKS) & set(obj.metadata.annotations) - set(marks))
        for mark in sorted(marks):
            if mark not in obj.metadata.annotations:
                store.record_event(obj, _reason(mark), f"by budget {marks[mark]}", warning=True)
        for mark in lifted:
            store.record_event(obj, _reason(mark) + "Lifted", "no budget asks it any longer")
        return
    log.warning("could not mark %s %s: it kept changing", obj.kind, obj.name)


def _reason(mark: str) -> str:
    return "AdmissionStopped" if mark == ADMISSION_STOPPED else "PriorityLowered"
