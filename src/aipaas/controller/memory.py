"""What the controller keeps between cycles, in one object (``Controller.memory``).

Every piece of state that the at-most-once guarantee and the cycle's shortcuts rest on is a
field here, with why it may be lost: a restarted controller starts from an empty memory and
must still never start an attempt twice, nor free what may run. What is durable (task records,
``stopping`` marks, the lease) is in the store; this only saves work or remembers what a
process asked.

Who uses it: controller/cycle.py (its steps read and update it), admission.py (``batch``),
membership.py (``batch.membership``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aipaas.controller.batch_cycle import BatchState
from aipaas.controller.extensions import CycleContext
from aipaas.controller.quiet import QuietCycles
from aipaas.controller.stop_drain import HeldStops
from aipaas.controller.work import FactsCache


@dataclass
class ControllerMemory:
    """The controller's state between cycles."""

    #: attempts this process asked to stop: one still running is not asked again every cycle
    #: (lost on a restart: then asked once more, since the SIGKILL after the grace period died
    #: with the process)
    stop_asked: set[str] = field(default_factory=set)
    #: stopping attempts never seen running that the backend once said it did not know; a
    #: second "unknown" in a row confirms the stop (lost on a restart: two answers again)
    unknown_once: set[str] = field(default_factory=set)
    #: stops asked in this cycle, sent after a fenced write (``send_stops``); a cycle ended by
    #: LeaseLost sends none (emptied at each cycle's start)
    stops: list[str] = field(default_factory=list)
    #: evicted service replicas draining before their SIGTERM (controller/stop_drain.py; lost
    #: on a restart: the records stay ``stopping`` and a running one is asked to stop at once)
    held_stops: HeldStops = field(default_factory=HeldStops)
    #: jobs (uid, resourceVersion) whose status matched their records at the last write-back
    #: (lost: every job's status is compared once more)
    verified: set[tuple[str, str]] = field(default_factory=set)
    #: what each cycle reads of a job, kept while its version stays (controller/work.py)
    facts: FactsCache = field(default_factory=FactsCache)
    #: the jobs' generation whose pending counts the metrics show (-1: none yet)
    published: int = -1
    #: the batch session's state: options, fingerprint, next due time, templates, elastic
    #: membership written, taints' first sightings (controller/batch_cycle.py)
    batch: BatchState = field(default_factory=BatchState)
    #: a cycle's jobs and placement, used again by a next cycle with nothing new (quiet.py)
    quiet: QuietCycles = field(default_factory=QuietCycles)
    #: what the last cycle handed its extensions: the next cycle's intakes read it (lost:
    #: the first cycle's intakes see no jobs, as on a fresh start)
    last_context: CycleContext | None = None
