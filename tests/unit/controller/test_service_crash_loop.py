"""Crash loops on a simulated cluster with a virtual clock: a replica whose process exits
(code 3) at once is replaced after 10 s, then 20 s, 40 s, 80 s (doubling to 5 minutes); the
service's status says CrashLoopBackOff with the exit code and the end of the replica's log
while it waits; a replica that ran 10 minutes before it failed starts the count again at 10 s;
a controller that starts again keeps the crash loop its status holds."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime

from aipaas.api.service import Service, ServiceStatus
from aipaas.backends.base import LaunchRequest, NodeInfo
from aipaas.backends.sim import SimBackend
from aipaas.backends.sim.backend import EXIT_CODE_ANNOTATION
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.controller.services import ServiceExtension
from tests.support.ctl_world import World

SERVICE = """
apiVersion: aipaas/v1
kind: Service
metadata: {name: broken, tenant: acme}
spec:
  queue: research
  replicas: 1
  template:
    command: [serve]
    resources: {cpu: 1, memory: 1Gi}
"""
NOON = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


class ExitingSim(SimBackend):
    """Every task runs ``lifetime`` seconds, then exits with code 3."""

    lifetime = 1.0

    def start(self, request: LaunchRequest) -> None:
        annotations = {**request.annotations, EXIT_CODE_ANNOTATION: "3"}
        super().start(replace(request, duration_seconds=self.lifetime, annotations=annotations))


def world_of(world: World, lifetime: float) -> tuple[Controller, VirtualClock]:
    world.setup()
    clock = VirtualClock(NOON)
    nodes = [NodeInfo("cpu-0", "sim", 64000, 512 * 1024)]
    backend = ExitingSim(world.tmp / "run", nodes, clock)
    backend.lifetime = lifetime
    controller = world.controller(backend, clock, extensions=[ServiceExtension(seed=5)])
    world.service.apply_text(SERVICE)
    return controller, clock


def status(world: World) -> ServiceStatus:
    found = world.store.get("Service", "acme", "broken")
    assert isinstance(found, Service) and found.status is not None
    return found.status


def starts(controller: Controller, clock: VirtualClock, world: World, seconds: int) -> list[float]:
    """The virtual times at which a new replica was listed, one cycle per second."""
    seen: dict[str, float] = {}
    began = clock.now().timestamp()
    for _ in range(seconds):
        controller.run_cycle()
        for record in status(world).replica_jobs:
            seen.setdefault(record.job, clock.now().timestamp() - began)
        clock.advance(1.0)
    return sorted(seen.values())


def test_an_exiting_replica_is_replaced_after_a_doubling_wait(world: World) -> None:
    controller, clock = world_of(world, lifetime=1.0)
    times = starts(controller, clock, world, 170)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    # Each gap: the replica's start and its 1 s of life, then the back-off.
    waits = [gap - gaps[0] + 10 for gap in gaps]
    assert [round(w / 10) * 10 for w in waits] == [10, 20, 40, 80], gaps
    assert len(times) <= 6


def test_while_it_waits_the_status_says_crash_loop_back_off_with_exit_code_and_log(
    world: World,
) -> None:
    controller, clock = world_of(world, lifetime=1.0)
    for _ in range(12):
        controller.run_cycle()
        clock.advance(1.0)
        if status(world).reason == "CrashLoopBackOff":
            break
    found = status(world)
    assert found.reason == "CrashLoopBackOff", found
    assert found.crash_loop is not None
    assert found.crash_loop.last_exit_code == 3 and found.crash_loop.restarts == 1
    assert "simulated task" in found.crash_loop.log_tail
    assert "exited with code 3" in found.message and "the next starts at" in found.message
    backoffs = [e for e in world.store.list_events(kind="Service", name="broken")]
    assert any(e.reason == "BackOff" and "starts in 10s" in e.message for e in backoffs)


def test_a_replica_that_ran_ten_minutes_starts_the_count_again(world: World) -> None:
    controller, clock = world_of(world, lifetime=1.0)
    starts(controller, clock, world, 40)  # two failures: the next wait would be 40 s
    first = status(world).crash_loop
    assert first is not None and first.restarts >= 2
    backend = controller.backend
    assert isinstance(backend, ExitingSim)
    backend.lifetime = 700.0  # the next replica runs past 10 minutes, then fails
    for _ in range(900):
        controller.run_cycle()
        clock.advance(1.0)
        crash = status(world).crash_loop
        if crash is not None and crash.restarts == 1:
            break
    crash = status(world).crash_loop
    assert crash is not None and crash.restarts == 1 and crash.back_off_seconds == 10


def test_a_new_controller_keeps_the_crash_loop_of_the_status(world: World) -> None:
    controller, clock = world_of(world, lifetime=1.0)
    starts(controller, clock, world, 15)
    before = status(world).crash_loop
    assert before is not None
    again = world.controller(
        controller.backend, clock, extensions=[ServiceExtension(seed=6)]
    )  # a restart: the services step's memory is new
    again.run_cycle()
    after = status(world).crash_loop
    assert after is not None and after.restarts == before.restarts
    assert status(world).reason == "CrashLoopBackOff"
