"""Tasks whose claims' devices got a NoExecute taint they do not tolerate are evicted.

Who calls it: controller/cycle.py, after the cycle's placement read the allocated claims
(``ClaimBook.no_execute``: devices/device_eviction.py says which), with those hits and the
moment; it returns the stops to send. An evicted task goes back
to Pending as a preempted one does (its attempt not counted against backoffLimit); once it has
stopped its claim is freed, and it is placed again where no such taint is (a NoExecute taint
also keeps new allocations off the device).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from aipaas.controller.batch_cycle import evict
from aipaas.controller.claims import NoExecuteHit
from aipaas.controller.lifecycle import Stop
from aipaas.controller.work import ACTIVE, JobWork
from aipaas.scheduler.batch.model import Eviction

REASON = "DeviceTaint"
BY = "a NoExecute device taint"


def evict_for_device_taints(
    hits: Sequence[NoExecuteHit], work: Sequence[JobWork], now: datetime
) -> list[Stop]:
    """Evict the running tasks of the claims a device NoExecute taint ends; their stops."""
    if not hits:
        return []
    jobs = {(i.job.tenant, i.job.name, i.job.metadata.uid or ""): i for i in work}
    stops: list[Stop] = []
    for hit in hits:
        for user in hit.users:
            job, _, task = str(user.get("name", "")).partition("/")
            item = jobs.get((hit.tenant, job, str(user.get("uid", ""))))
            record = next((r for r in item.records if r.name == task), None) if item else None
            if item is None or record is None or record.stopping or record.phase not in ACTIVE:
                continue
            eviction = Eviction(f"{hit.tenant}/{job}", task, BY, REASON, hit.reason)
            _, stop = evict(item, record, eviction, now)
            stops += [stop] if stop is not None else []
            item.event(REASON, f"{task}: {hit.reason}", True)
    return stops
