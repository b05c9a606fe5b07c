"""Step 0 of the cycle, the intakes (controller/extensions.py ``CycleIntake``): a job an
intake stores is listed and placed by the same cycle; an intake sees the context the last
cycle handed its extensions; a failing intake is logged and the cycle goes on; extensions of
step 6 still run after placement."""

from __future__ import annotations

import pytest

from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.controller.extensions import CycleContext, CycleIntake, split_extensions
from tests.support.ctl_world import World

TASKS = """    - name: worker
      replicas: 1
      command: [train]
      resources: {cpu: 8, memory: 64Gi, gpu: 4}
"""


class SubmitOnce:
    """An intake that submits one job at a given cycle, and notes every context it saw."""

    name = "submit-once"

    def __init__(self, world: World, job: str, at_cycle: int = 0) -> None:
        self.world, self.job, self.at_cycle = world, job, at_cycle
        self.seen: list[CycleContext] = []

    def take_in(self, context: CycleContext) -> None:
        self.seen.append(context)
        if context.cycle == self.at_cycle:
            self.world.submit(self.job, TASKS)


class Failing:
    name = "failing"

    def take_in(self, context: CycleContext) -> None:
        raise RuntimeError("the intake's source is down")


class CountsPlaced:
    """A step-6 extension: which jobs had a placed task when it ran."""

    name = "counts-placed"

    def __init__(self) -> None:
        self.placed: list[frozenset[tuple[str, str]]] = []

    def run(self, context: CycleContext) -> None:
        self.placed.append(context.placed)


def sim_controller(world: World, *extensions: object) -> Controller:
    world.setup()
    clock = VirtualClock()
    backend = SimBackend(world.tmp / "run", load_cluster(), clock, default_duration=600)
    return world.controller(backend, clock, extensions=list(extensions))


def test_a_job_an_intake_stores_is_placed_by_the_same_cycle(world: World) -> None:
    intake = SubmitOnce(world, "taken")
    controller = sim_controller(world, intake)
    controller.run_cycle()
    assert world.phase("taken") == "Running"


def test_an_intake_sees_the_last_cycles_context_with_this_cycles_count(world: World) -> None:
    intake = SubmitOnce(world, "taken")
    controller = sim_controller(world, intake)
    for _ in range(3):
        controller.run_cycle()
    assert [c.cycle for c in intake.seen] == [0, 1, 2]
    assert intake.seen[0].jobs == {}  # a first cycle knows no jobs yet
    assert ("acme", "taken") in intake.seen[1].jobs
    assert ("acme", "taken") in intake.seen[1].placed


def test_a_failing_intake_is_logged_and_the_cycle_goes_on(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    controller = sim_controller(world, Failing(), SubmitOnce(world, "after-failure"))
    controller.run_cycle()
    assert world.phase("after-failure") == "Running"
    assert "controller extension failing failed in cycle 0" in caplog.text


def test_step_six_extensions_run_after_placement_and_intakes_before(world: World) -> None:
    extension = CountsPlaced()
    controller = sim_controller(world, extension, SubmitOnce(world, "taken"))
    assert [type(e) for e in controller.intakes] == [SubmitOnce]
    assert controller.extensions == [extension]
    controller.run_cycle()
    assert extension.placed == [frozenset({("acme", "taken")})]


def test_split_keeps_each_kinds_order() -> None:
    first, second, later = Failing(), Failing(), CountsPlaced()
    assert isinstance(first, CycleIntake) and not isinstance(later, CycleIntake)
    intakes, extensions = split_extensions([first, later, second])
    assert intakes == [first, second] and extensions == [later]
