"""A queue's minRuntime as the scheduler reads it (scheduler/batch/from_api.py queue_tree): its
own, else that of its nearest ancestor queue that sets one (a parent has no jobs of its own:
its minRuntime is its sub-queues', as KAI-Scheduler resolves it); a sub-queue's own value, 0
included, wins; none set anywhere is 0."""

from __future__ import annotations

from typing import Any

from aipaas.api.queue import Queue
from aipaas.api.registry import parse_object
from aipaas.api.tenancy import Tenant
from aipaas.scheduler.batch.from_api import queue_tree


def _tenant() -> Tenant:
    obj = parse_object({"apiVersion": "aipaas/v1", "kind": "Tenant", "metadata": {"name": "t"}})
    assert isinstance(obj, Tenant)
    return obj


def _queue(name: str, **spec: Any) -> Queue:
    obj = parse_object(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Queue",
            "metadata": {"name": name, "tenant": "t"},
            "spec": spec,
        }
    )
    assert isinstance(obj, Queue)
    return obj


def test_sub_queues_take_the_nearest_ancestors_min_runtime() -> None:
    queues = [
        _queue("top", minRuntime="1h"),
        _queue("mid", parent="top", minRuntime="10m"),
        _queue("under-mid", parent="mid"),
        _queue("under-top", parent="top"),
        _queue("own-zero", parent="top", minRuntime="0s"),
        _queue("alone"),
    ]
    tree = queue_tree([_tenant()], queues)
    assert tree["t/top"].min_runtime == 3600
    assert tree["t/mid"].min_runtime == 600  # its own
    assert tree["t/under-mid"].min_runtime == 600  # the nearest ancestor's, not the top's
    assert tree["t/under-top"].min_runtime == 3600
    assert tree["t/own-zero"].min_runtime == 0  # its own 0 wins over the parent's hour
    assert tree["t/alone"].min_runtime == 0


def test_a_cycle_of_parents_inherits_nothing_and_does_not_hang() -> None:
    # The server refuses cycles; the scheduler puts such queues under their tenant.
    queues = [_queue("a", parent="b"), _queue("b", parent="a", minRuntime="1h")]
    tree = queue_tree([_tenant()], queues)
    assert tree["t/a"].parent == "t" and tree["t/a"].min_runtime == 0
