"""The controller loop's housekeeping hook (event trimming) runs after the cycles of the
process that holds the lease, and only there."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

from aipaas.clock import SystemClock
from aipaas.controller.cycle import Controller
from aipaas.controller.loop import ControllerLoop
from aipaas.store.lease import Lease


class FakeBackend:
    def close(self) -> None:
        pass


class FakeController:
    def __init__(self) -> None:
        self.clock = SystemClock()
        self.backend = FakeBackend()
        self.cycles = 0
        self.lease: Any = None
        self.on_written: Any = None

    def run_cycle(self) -> None:
        self.cycles += 1


class FakeLease:
    holder = "me"

    def __init__(self, held: bool) -> None:
        self.held = held

    def acquire(self) -> bool:
        return self.held

    def release(self) -> None:
        pass

    def holder_now(self) -> str | None:
        return "me" if self.held else "other"


def run_loop(held: bool) -> tuple[int, int]:
    controller = FakeController()
    ran = threading.Event()
    calls = 0

    def housekeeping() -> None:
        nonlocal calls
        calls += 1
        ran.set()

    loop = ControllerLoop(
        cast(Controller, controller),
        period=0.01,
        lease=cast(Lease, FakeLease(held)),
        housekeeping=housekeeping,
    )
    loop.start()
    if held:
        ran.wait(1.0)
    else:
        time.sleep(0.1)  # several periods: time enough for cycles that must not happen
    loop.stop()
    return controller.cycles, calls


def test_the_lease_holder_runs_it_after_its_cycles() -> None:
    cycles, calls = run_loop(held=True)
    assert cycles >= 1 and calls >= 1
    assert calls <= cycles


def test_a_process_without_the_lease_does_not() -> None:
    assert run_loop(held=False) == (0, 0)
