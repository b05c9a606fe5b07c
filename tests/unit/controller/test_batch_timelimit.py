"""spec.timeLimit in the live controller (issue 11 item 4): a job running past its limit is
stopped and ends Failed with reason TimeLimit; one that ends in time is not touched."""

from __future__ import annotations

from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from tests.support.ctl_world import World

TASK = """    - name: worker
      replicas: 2
      command: [train]
      resources: {cpu: 1, memory: 1Gi, gpu: 1}
"""


def sim(world: World, duration: float) -> tuple[Controller, VirtualClock, SimBackend]:
    clock = VirtualClock()
    backend = SimBackend(world.tmp / "run", load_cluster(), clock, default_duration=duration)
    return world.controller(backend, clock), clock, backend


def test_a_job_past_its_time_limit_fails(world: World) -> None:
    world.setup()
    controller, clock, backend = sim(world, duration=600)
    world.submit("long", TASK, extra="  timeLimit: 1m\n")
    controller.run_cycle()
    assert world.phase("long") == "Running"
    clock.advance(59)
    controller.run_cycle()
    assert world.phase("long") == "Running"
    clock.advance(2)
    controller.run_cycle()
    status = world.job("long").status
    assert status is not None and status.phase.value == "Failed"
    assert status.reason == "TimeLimit"
    assert "60s" in status.message
    assert [t.phase.value for t in status.tasks] == ["Cancelled", "Cancelled"]
    # the backend was told: the tasks no longer run there
    answers = backend.status([f"{world.job('long').metadata.uid}.worker-{i}.0" for i in (0, 1)])
    assert all(a.state.value != "Running" for a in answers.values())
    assert world.reasons("long")[-1] == "Failed"


def test_a_job_within_its_limit_succeeds(world: World) -> None:
    world.setup()
    controller, clock, _ = sim(world, duration=30)
    world.submit("short", TASK, extra="  timeLimit: 1m\n")
    controller.run_cycle()
    clock.advance(31)
    controller.run_cycle()
    assert world.phase("short") == "Succeeded"


def test_a_job_whose_stop_is_slow_still_ends_with_time_limit(world: World) -> None:
    """The stop is confirmed cycles later; the job ends Failed (TimeLimit) then, not before."""
    world.setup()
    controller, clock, backend = sim(world, duration=600)
    asked: list[str] = []
    backend.stop = lambda request_id, grace_seconds=5.0: asked.append(request_id)  # type: ignore[method-assign]
    world.submit("slow", TASK, extra="  timeLimit: 10s\n")
    controller.run_cycle()
    clock.advance(11)
    controller.run_cycle()
    status = world.job("slow").status
    assert status is not None and status.phase.value == "Running"
    assert status.reason == "Stopping"
    assert len(asked) == 2
    for rid in asked:
        SimBackend.stop(backend, rid)
    clock.advance(1)
    controller.run_cycle()
    status = world.job("slow").status
    assert status is not None and status.phase.value == "Failed"
    assert status.reason == "TimeLimit"
