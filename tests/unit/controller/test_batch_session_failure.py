"""A failing batch session (a scheduler bug) stops only scheduling: the rest of the cycle still
runs (completions are recorded), nothing starts, and the next cycle tries again."""

from __future__ import annotations

import pytest

from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from aipaas.scheduler.batch import actions
from aipaas.scheduler.batch.session import Session
from tests.support.ctl_world import World

TASK = """    - name: w
      replicas: 1
      command: [train]
      resources: {cpu: 1, memory: 1Gi, gpu: 1}
"""


def test_a_failing_session_starts_nothing_and_the_cycle_goes_on(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.setup()
    clock = VirtualClock()
    controller = world.controller(SimBackend(world.tmp / "run", load_cluster(), clock, 10), clock)
    world.submit("first", TASK)
    controller.run_cycle()
    assert world.phase("first") == "Running"

    def broken(session: Session) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setitem(actions.ACTIONS, "allocate", broken)
    world.submit("second", TASK)
    clock.advance(11)
    controller.run_cycle()
    assert world.phase("first") == "Succeeded"  # step 2 and 3 still ran
    assert world.phase("second") == "Pending"
    monkeypatch.undo()
    controller.run_cycle()
    assert world.phase("second") == "Running"
