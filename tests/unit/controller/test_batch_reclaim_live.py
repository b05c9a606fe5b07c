"""Reclaim in the live controller (issue 11 item 3): a queue below its fair share with pending
work takes back GPUs from a queue above its own, across queues, whatever the priorities; the
victim goes back to Pending with reason Reclaimed and its status names the reclaimer."""

from __future__ import annotations

from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.store import TaskRepository
from tests.support.ctl_world import World, sim_backend

ONE_NODE = """    - name: worker
      replicas: 1
      command: [train]
      resources: {cpu: 8, memory: 64Gi, gpu: 8}
"""
QUEUES = """apiVersion: aipaas/v1
kind: Queue
metadata: {name: owner, tenant: acme}
spec: {guaranteed: {gpu: 8}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: borrower, tenant: acme}
"""


def sim(world: World, kind: str) -> tuple[Controller, VirtualClock]:
    """A controller on the sim cluster (GPUs by count, or publishing slices: ``kind``)."""
    clock = VirtualClock()
    backend = sim_backend(world, clock, kind)
    return world.controller(backend, clock), clock


def test_a_queue_below_its_guarantee_reclaims(world: World, cluster_kind: str) -> None:
    world.setup("{gpu: 100}")
    world.service.apply_text(QUEUES)
    controller, clock = sim(world, cluster_kind)
    for name in ("b1", "b2"):  # the owner queue has no work: the borrower takes all 16 GPUs
        world.submit(name, ONE_NODE, queue="borrower", extra="  priority: high\n")
        clock.advance(1)
        controller.run_cycle()
    assert [world.phase(n) for n in ("b1", "b2")] == ["Running", "Running"]
    world.submit("mine", ONE_NODE, queue="owner", extra="  priority: low\n")
    clock.advance(1)
    controller.run_cycle()
    reclaimed = [n for n in ("b1", "b2") if world.phase(n) == "Pending"]
    assert len(reclaimed) == 1  # one job is enough: the fewest victims
    victim = world.job(reclaimed[0]).status
    assert victim is not None and victim.reason == "Reclaimed"
    assert "acme/mine" in victim.message
    assert "Reclaimed" in world.reasons(reclaimed[0])
    clock.advance(1)
    controller.run_cycle()
    assert world.phase("mine") == "Running"
    held = [
        (r.node, g)
        for records in TaskRepository(world.store).of_jobs_not_in([]).values()
        for r in records
        if r.node is not None
        for g in r.gpus
    ]
    assert len(held) == len(set(held)) == 16
    # The borrower, back at its fair share, does not take the GPUs back next cycle.
    for _ in range(3):
        clock.advance(1)
        controller.run_cycle()
    assert world.phase("mine") == "Running"
    assert world.phase(reclaimed[0]) == "Pending"
