"""Stops that wait for a drain: an evicted service replica leaves the endpoints first.

A preemptible replica that is evicted (a preemptor, or a lending pool's owner taking its GPUs
back) is out of its service's endpoints in the cycle of the eviction, since its task is no
longer Running (controller/services_reconcile.py); its SIGTERM is held for the drain its job
names (``aipaas.dev/eviction-drain-seconds``, which controller/services_replicas.py writes
from the service's ``drainSeconds`` and ``onEviction: Drain``) so that the requests it is
answering finish. The drain is at most the job's grace period: an eviction never holds the
preemptor's resources longer than a job may already ask for with
``terminationGracePeriodSeconds``. Kubernetes has the same shape in a pod's preStop hook.

Held stops live in this process only: a controller that restarts meanwhile asks the stop of
a still-running, ``stopping`` attempt at once (controller/cycle.py), the safe side for the
preemptor. Who calls it: controller/cycle.py (``ask_stop``, ``send_stops``, the observe step)
and controller/batch_cycle.py (``evict``).
"""

from __future__ import annotations

import math

from aipaas.api.job import Job
from aipaas.api.service import EVICTION_DRAIN_ANNOTATION


def eviction_drain_seconds(job: Job) -> float:
    """How long an evicted task of ``job`` keeps running out of the endpoints before its
    SIGTERM: the job's drain annotation, at most its grace period; 0 without one."""
    text = job.metadata.annotations.get(EVICTION_DRAIN_ANNOTATION, "")
    try:
        asked = float(text)
    except ValueError:
        return 0.0
    if not math.isfinite(asked) or asked <= 0:
        return 0.0
    return min(asked, float(job.spec.grace_seconds))


class HeldStops:
    """Attempts whose stop waits until a moment (seconds since the epoch)."""

    def __init__(self) -> None:
        self._due: dict[str, float] = {}

    def hold(self, request_id: str, until: float) -> None:
        """Send the stop of ``request_id`` at ``until``, not before (a later hold of the same
        attempt does not postpone it)."""
        self._due[request_id] = min(until, self._due.get(request_id, until))

    def holds(self, request_id: str) -> bool:
        return request_id in self._due

    def release(self, request_id: str) -> None:
        """The attempt is stopped another way (at once): nothing is held for it any more."""
        self._due.pop(request_id, None)

    def take_due(self, now: float) -> list[str]:
        """The attempts whose drain is over, in the order they were held; no longer held."""
        due = [rid for rid, until in self._due.items() if until <= now]
        for rid in due:
            del self._due[rid]
        return due

    def __len__(self) -> int:
        return len(self._due)
