"""The controller loop's readiness follows its cycles: not ready while a cycle runs past the
stall bound, ready again once it ends; not ready when no cycle has ended for that long."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

from aipaas.clock import SystemClock
from aipaas.controller.cycle import Controller
from aipaas.controller.loop import ControllerLoop


class FakeBackend:
    def close(self) -> None:
        pass


class BlockingController:
    """A controller whose cycles wait while ``gate`` is closed."""

    def __init__(self) -> None:
        self.clock = SystemClock()
        self.backend = FakeBackend()
        self.lease: Any = None
        self.on_written: Any = None
        self.gate = threading.Event()
        self.gate.set()
        self.cycles = 0

    def run_cycle(self) -> None:
        self.gate.wait()
        self.cycles += 1


def wait_for(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_cycle_past_the_bound_is_not_ready_and_ready_again_once_it_ends() -> None:
    controller = BlockingController()
    loop = ControllerLoop(cast(Controller, controller), period=0.02, stall_seconds=0.3)
    loop.start()
    try:
        wait_for(loop.is_ready)
        controller.gate.clear()
        wait_for(lambda: loop.stalled() is not None)
        assert not loop.is_ready()
        why = loop.stalled()
        assert why is not None and why.startswith("the controller's cycle has run for")
        controller.gate.set()
        wait_for(loop.is_ready)
    finally:
        controller.gate.set()
        loop.stop()


def test_no_cycle_ended_for_longer_than_the_bound_is_not_ready() -> None:
    controller = BlockingController()
    loop = ControllerLoop(cast(Controller, controller), period=0.02, stall_seconds=0.3)
    loop.ready.set()
    loop._cycle_finished = time.monotonic() - 1.0  # the thread gone quiet, no cycle running
    why = loop.stalled()
    assert why is not None and why.startswith("no controller cycle has finished for")
    assert not loop.is_ready()
