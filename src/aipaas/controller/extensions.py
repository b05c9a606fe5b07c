"""Step 6 of the controller cycle: the later domains' reconcilers (datasets and caches,
services, node pools, budgets, a Kubernetes cluster's own pods), each a ``CycleExtension``.

An extension gets the cycle's facts in a ``CycleContext`` and works through the store and the
backend it is handed; it never reaches into the ``Controller``. Its writes that precede a start
or a stop go through ``context.transaction`` (fenced by the controller's lease). An extension
that fails is logged and the cycle goes on: one domain's bug does not stop the others.
Which extensions a server runs: controller/extension_set.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

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


def run_extensions(extensions: Sequence[CycleExtension], context: CycleContext) -> None:
    """Each extension in order; a failing one is logged and skipped (``LeaseLost`` is not a
    failure: it ends the cycle, as in every other step)."""
    from aipaas.store.lease import LeaseLost

    for extension in extensions:
        try:
            extension.run(context)
        except LeaseLost:
            raise
        except Exception:
            log.exception(
                "controller extension %s failed in cycle %d", extension.name, context.cycle
            )
