"""Lending through the live controller on the sim backend: a pool lends its idle GPUs (the
lender's guarantee) to another tenant's spot work, which is evicted in the cycle the lender's
own job arrives; the ledger then shows the spot GPU-hours charged to the borrower at the spot
price and credited to the lender."""

from __future__ import annotations

import pytest

from aipaas.api.pool import NodePool
from aipaas.autoscale.lending import balances, reclaim_problem, reclaim_seconds, terms_of
from aipaas.backends.base import NodeInfo
from aipaas.backends.sim import SimBackend
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.controller.pools import PoolController
from aipaas.metering.lending_report import lending_report
from tests.support.ctl_world import World

SETUP = """
apiVersion: aipaas/v1
kind: PriorityClass
metadata: {name: spot}
spec: {value: -100, preemptible: true, description: lent capacity}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
spec: {guaranteed: {gpu: 8}, quota: {gpu: 8}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
spec: {guaranteed: {gpu: 8}}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: globex}
spec: {allowedPriorityClasses: [spot, low, normal]}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: spot, tenant: globex}
---
apiVersion: aipaas/v1
kind: NodePool
metadata: {name: lent}
spec:
  backend: sim
  node: {cpu: 64, memory: 512Gi, gpus: {count: 8, model: H100}}
  minSize: 1
  maxSize: 1
  provisioningDelay: 0s
  lending:
    enabled: true
    lender: acme
    spotPricePerGpuHour: 2.0
    gracePeriod: 10s
    reclaimWithin: 30s
"""
JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, tenant: {tenant}, annotations: {{sim.aipaas.dev/duration: '36000'}}}}
spec:
  queue: {queue}
  priorityClassName: {tier}
  tasks:
    - {{name: w, replicas: 1, command: [run], resources: {{cpu: 8, memory: 64Gi, gpu: 8}}}}
"""


def lending_world(world: World) -> tuple[Controller, VirtualClock]:
    world.service.apply_text(SETUP)
    clock = VirtualClock()
    backend = SimBackend(world.tmp / "run", [NodeInfo("cpu-0", "sim", 8000, 32768)], clock)
    controller = world.controller(backend, clock, extensions=[PoolController()])
    controller.run_cycle()  # the pool makes its one node (minSize)
    clock.advance(11)  # the next inventory read (every 10 s) sees it
    controller.run_cycle()
    return controller, clock


def phase(world: World, tenant: str, name: str) -> str:
    job = world.store.get("Job", tenant, name)
    status = getattr(job, "status", None)
    return status.phase.value if status else "Pending"


def test_spot_work_borrows_idle_gpus_and_goes_first_when_the_lender_needs_them(
    world: World,
) -> None:
    controller, clock = lending_world(world)
    world.service.apply_text(JOB.format(name="batch", tenant="globex", queue="spot", tier="spot"))
    controller.run_cycle()
    assert phase(world, "globex", "batch") == "Running"  # on the lent node
    clock.advance(3600)  # an hour of spot work
    controller.run_cycle()
    world.service.apply_text(JOB.format(name="own", tenant="acme", queue="research", tier="normal"))
    controller.run_cycle()  # the cycle that sees the lender's job evicts the spot job
    assert phase(world, "globex", "batch") in ("Failed", "Pending")
    controller.run_cycle()
    assert phase(world, "acme", "own") == "Running"
    reasons = [e.reason for e in world.store.list_events(kind="Job", name="batch")]
    assert any(r in ("Reclaimed", "Preempted", "Evicted") for r in reasons), reasons
    lines = lending_report(world.store)
    assert [(line.lender, line.borrower, line.pool) for line in lines] == [
        ("acme", "globex", "lent")
    ]
    assert lines[0].gpu_hours == pytest.approx(8.0, rel=0.01)
    assert balances(lines) == pytest.approx({"acme": 16.0, "globex": -16.0}, rel=0.01)


def test_the_lenders_own_spot_work_is_not_lent(world: World) -> None:
    controller, clock = lending_world(world)
    world.service.apply_text(
        JOB.format(name="mine", tenant="acme", queue="research", tier="normal")
    )
    controller.run_cycle()
    clock.advance(600)
    controller.run_cycle()
    assert lending_report(world.store) == []


def test_reclaim_bound_against_reclaim_within(world: World) -> None:
    world.service.apply_text(SETUP)
    pool = world.store.get("NodePool", "", "lent")
    assert isinstance(pool, NodePool)
    terms = terms_of(pool)
    assert terms is not None
    assert reclaim_seconds(terms, cycle_seconds=1.0, stop_grace_seconds=5.0) == 6.0
    assert reclaim_problem(terms, 1.0, 5.0) is None
    problem = reclaim_problem(terms, 25.0, 30.0)  # 25 s cycle + 10 s grace > 30 s
    assert problem is not None and "reclaimWithin" in problem


def test_a_pool_whose_reclaim_bound_cannot_be_kept_says_so(world: World) -> None:
    world.service.apply_text(SETUP)
    clock = VirtualClock()
    backend = SimBackend(world.tmp / "run", [NodeInfo("cpu-0", "sim", 8000, 32768)], clock)
    slow = PoolController(cycle_seconds=25.0, stop_grace_seconds=30.0)
    controller = world.controller(backend, clock, extensions=[slow])
    controller.run_cycle()
    pool = world.store.get("NodePool", "", "lent")
    assert isinstance(pool, NodePool) and pool.status is not None
    assert "more than reclaimWithin 30s" in pool.status.message
