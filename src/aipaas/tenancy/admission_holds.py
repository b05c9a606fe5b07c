"""Holds on admission that budgets put (controller/budget_marks.py): a queue or tenant marked
``aipaas.dev/admission-stopped`` starts no new work; what runs goes on."""

from __future__ import annotations

from aipaas.api.finops import ADMISSION_STOPPED
from aipaas.api.queue import Queue
from aipaas.api.tenancy import Tenant


def admission_held(tenant: Tenant, queue: Queue) -> tuple[str, str] | None:
    """(reason, message) when a budget stopped admission to the queue or its tenant."""
    for obj, what in ((queue, f"queue {queue.name}"), (tenant, f"tenant {tenant.name}")):
        budgets = obj.metadata.annotations.get(ADMISSION_STOPPED)
        if budgets:
            return "AdmissionStopped", f"{what}: admission stopped by budget {budgets}"
    return None
