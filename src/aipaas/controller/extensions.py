"""Step 6 of the controller cycle: the later domains' reconcilers (datasets and caches,
services, node pools, budgets), each a ``CycleExtension``; and step 0, the intakes: work that
arrives from outside the store (a Kubernetes cluster's own pods), each a ``CycleIntake``,
taken in before the cycle lists its jobs so that the same cycle places what it stored.

An extension gets the cycle's facts in a ``CycleContext`` and works through the store and the
backend it is handed; it never reaches into the ``Controller``. Its writes that precede a start
or a stop go through ``context.transaction`` (fenced by the controller's lease). An extension
that fails is logged and the cycle goes on: one domain's bug does not stop the others.
Which extensions a server runs: controller/extension_set.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from aipaas.api.job import Job
from aipaas.backends.base import Backend, NodeInfo
from aipaas.clock import Clock
from aipaas.metering.metrics import Metrics
from aipaas.store import Connection, Store, TaskRecord

log = logging.getLogger("aipaas.controller")


@dataclass(frozen=True)
class CycleContext:
    """What one cycle hands its extensions."""

    store: Store
    backend: Backend
    clock: Clock
    metrics: Metrics
    #: the backend's nodes as last reported (step 1)
    nodes: Sequence[NodeInfo]
    #: a write transaction that first checks the controller's lease (``LeaseLost`` if lost)
    transaction: Callable[[], AbstractContextManager[Connection]]
    #: the controller's cycle count (0 on the first cycle of this process)
    cycle: int
    #: (tenant, name) -> the unfinished jobs the cycle listed, as listed (their status as of
    #: the last write-back): what an extension reads instead of one store query per job (a
    #: job not here, say one created since: ask the store)
    jobs: Mapping[tuple[str, str], Job] = field(default_factory=dict)
    #: (tenant, name) of those with a task placed on a node in or before this cycle
    placed: frozenset[tuple[str, str]] = frozenset()
    #: the task records of those jobs that are Running, as the cycle left them (written)
    running: Sequence[TaskRecord] = ()


class CycleExtension(Protocol):
    """One domain's reconciler, run once per cycle after the jobs' own steps."""

    name: str

    def run(self, context: CycleContext) -> None: ...


@runtime_checkable
class CycleIntake(Protocol):
    """Work from outside the store, taken in at the start of a cycle (step 0), before the
    cycle lists its jobs: a job stored here is placed by this cycle, not the next. Its
    context is the one the last cycle handed its extensions (its jobs and placed tasks as
    that cycle left them), with this cycle's count."""

    name: str

    def take_in(self, context: CycleContext) -> None: ...


def split_extensions(
    given: Sequence[CycleExtension | CycleIntake],
) -> tuple[list[CycleIntake], list[CycleExtension]]:
    """The intakes and the step-6 extensions among ``given``, each in the order given."""
    intakes = [e for e in given if isinstance(e, CycleIntake)]
    later = [e for e in given if not isinstance(e, CycleIntake)]
    return intakes, later


def run_extensions(extensions: Sequence[CycleExtension], context: CycleContext) -> None:
    """Each extension in order; a failing one is logged and skipped (``LeaseLost`` is not a
    failure: it ends the cycle, as in every other step)."""
    for extension in extensions:
        with _guarded(extension.name, context.cycle):
            extension.run(context)


def run_intakes(intakes: Sequence[CycleIntake], context: CycleContext) -> None:
    """Each intake in order, failures handled as ``run_extensions`` handles them."""
    for intake in intakes:
        with _guarded(intake.name, context.cycle):
            intake.take_in(context)


@contextmanager
def _guarded(name: str, cycle: int) -> Iterator[None]:
    """One extension's run: a failure is logged and swallowed, ``LeaseLost`` raised."""
    from aipaas.store.lease import LeaseLost

    try:
        yield
    except LeaseLost:
        raise
    except Exception:
        log.exception("controller extension %s failed in cycle %d", name, cycle)
