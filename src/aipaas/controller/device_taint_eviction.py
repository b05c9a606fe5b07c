"""Tasks whose claims' devices got a NoExecute taint they do not tolerate are evicted.

Who calls it: controller/cycle.py, after the cycle's placement read the allocated claims
(``ClaimBook.no_execute``: devices/device_eviction.py says which). An evicted task goes back
to Pending as a preempted one does (its attempt not counted against backoffLimit); once it has
stopped its claim is freed, and it is placed again where no such taint is (a NoExecute taint
also keeps new allocations off the device).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from aipaas.controller.batch_cycle import evict
from aipaas.controller.work import ACTIVE, JobWork
from aipaas.scheduler.batch.model import Eviction

if TYPE_CHECKING:
    from aipaas.controller.cycle import Controller

REASON = "DeviceTaint"
BY = "a NoExecute device taint"


def evict_for_device_taints(ctl: Controller, work: Sequence[JobWork]) -> int:
    """Evict the running tasks of the claims a device NoExecute taint ends; how many."""
    if not ctl.claims.no_execute:
        return 0
    jobs = {(i.job.tenant, i.job.name, i.job.metadata.uid or ""): i for i in work}
    evicted = 0
    for hit in ctl.claims.no_execute:
        for user in hit.users:
            job, _, task = str(user.get("name", "")).partition("/")
            item = jobs.get((hit.tenant, job, str(user.get("uid", ""))))
            record = next((r for r in item.records if r.name == task), None) if item else None
            if item is None or record is None or record.stopping or record.phase not in ACTIVE:
                continue
            evict(ctl, item, record, Eviction(f"{hit.tenant}/{job}", task, BY, REASON, hit.reason))
            item.event(REASON, f"{task}: {hit.reason}", True)
            evicted += 1
    return evicted
