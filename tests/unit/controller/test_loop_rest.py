"""The controller loop's rest: short after a cycle that wrote something, doubling after each quiet
one up to the period, ended early by a wake-up, and never shorter than the cycle took (the API
keeps at least half the time). No timing asserts: the loop tests use a period of an hour, so a
cycle that comes at all came from a write or a wake-up."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

from aipaas.clock import SystemClock
from aipaas.controller.cycle import Controller
from aipaas.controller.loop import (
    ControllerLoop,
    backend_waited,
    cycle_share,
    next_rest,
    rest_plan,
)

HOUR = 3600.0
PATIENCE = 60.0  # seconds a test waits for what must happen, on a loaded machine


def test_a_cycle_that_wrote_is_followed_after_the_floor() -> None:
    assert next_rest(last=0.2, active=True, period=0.2, floor=0.02) == 0.02


def test_quiet_cycles_after_it_rest_twice_as_long_each_up_to_the_period() -> None:
    rests = [0.02]
    for _ in range(5):
        rests.append(next_rest(rests[-1], active=False, period=0.2, floor=0.02))
    assert rests == [0.02, 0.04, 0.08, 0.16, 0.2, 0.2]


def test_a_loop_that_was_quiet_rests_the_period() -> None:
    assert next_rest(last=0.2, active=False, period=0.2, floor=0.02) == 0.2


def test_a_wake_up_may_end_a_rest_after_the_floor() -> None:
    least, more = rest_plan(took=0.001, rest=0.2, floor=0.02)
    assert least == 0.02 and abs(more - 0.18) < 1e-9


def test_a_rest_lasts_at_least_as_long_as_the_cycle_took() -> None:
    assert rest_plan(took=0.5, rest=0.02, floor=0.02) == (0.5, 0.0)
    assert rest_plan(took=0.5, rest=0.2, floor=0.02) == (0.5, 0.0)
    least, more = rest_plan(took=0.1, rest=0.2, floor=0.02)
    assert least == 0.1 and abs(more - 0.1) < 1e-9


def test_time_blocked_on_the_backend_does_not_lengthen_the_rest() -> None:
    """A Ray cycle mostly waits on its driver process (neither CPU nor GIL held): only the rest
    of its time counts towards the rest's lower bound."""
    assert cycle_share(took=0.5, blocked=0.45) == 0.5 - 0.45
    least, _ = rest_plan(took=cycle_share(0.5, 0.45), rest=0.02, floor=0.02)
    assert abs(least - 0.05) < 1e-9
    assert cycle_share(took=0.1, blocked=0.0) == 0.1  # a backend that does not say
    assert cycle_share(took=0.1, blocked=0.3) == 0.0  # never negative


def test_the_backends_blocked_time_is_read_where_it_says() -> None:
    class Saying:
        waited_seconds = 2.5

    assert backend_waited(Saying()) == 2.5
    assert backend_waited(FakeBackend()) == 0.0


class FakeBackend:
    def close(self) -> None:
        pass


class FakeController:
    """Runs the cycles the test scripts: each writes the jobs it is given (or nothing)."""

    def __init__(self, writes: list[list[str]]) -> None:
        self.clock = SystemClock()
        self.backend = FakeBackend()
        self.lease: Any = None
        self.on_written: Callable[[Sequence[str]], None] | None = None
        self.writes = writes
        self.cycles = 0
        self.ran = threading.Condition()

    def run_cycle(self) -> None:
        wrote = self.writes[self.cycles] if self.cycles < len(self.writes) else []
        if wrote and self.on_written is not None:
            self.on_written(wrote)
        with self.ran:
            self.cycles += 1
            self.ran.notify_all()

    def wait_cycles(self, count: int) -> bool:
        with self.ran:
            return self.ran.wait_for(lambda: self.cycles >= count, PATIENCE)


def test_cycles_that_write_are_followed_at_once() -> None:
    controller = FakeController([["a"], ["b"]])
    heard: list[Sequence[str]] = []
    controller.on_written = heard.append  # the listener the server gave the controller
    loop = ControllerLoop(cast(Controller, controller), period=HOUR)
    loop.start()
    try:
        assert controller.wait_cycles(3)  # not an hour: the two that wrote were followed at once
        assert heard == [["a"], ["b"]]  # the server's listener still hears every write
    finally:
        loop.stop()


def test_a_loop_with_nothing_written_rests_the_period() -> None:
    controller = FakeController([])
    loop = ControllerLoop(cast(Controller, controller), period=HOUR)
    loop.start()
    try:
        assert controller.wait_cycles(1)
        time.sleep(0.2)  # many floors: a second cycle would need the hour or a wake-up
        assert controller.cycles == 1
    finally:
        loop.stop()


def test_a_wake_up_ends_the_rest() -> None:
    controller = FakeController([])
    loop = ControllerLoop(cast(Controller, controller), period=HOUR)
    loop.start()
    try:
        assert controller.wait_cycles(1)
        loop.wake()
        assert controller.wait_cycles(2)
        loop.wake()
        assert controller.wait_cycles(3)
    finally:
        loop.stop()


def test_stop_ends_the_rest() -> None:
    controller = FakeController([])
    loop = ControllerLoop(cast(Controller, controller), period=HOUR)
    loop.start()
    assert controller.wait_cycles(1)
    thread = loop._thread
    loop.stop()
    assert thread is not None and not thread.is_alive()


def test_a_backend_that_says_a_task_ended_wakes_the_loop() -> None:
    """A backend with ``watch`` (Ray's: its driver hears of a task's end) is given
    the loop's wake-up: a quiet loop runs its next cycle without waiting out the period."""

    class Telling(FakeBackend):
        def __init__(self) -> None:
            self.tell: Callable[[], None] | None = None

        def watch(self, on_change: Callable[[], None]) -> None:
            self.tell = on_change

    controller = FakeController([])
    backend = Telling()
    controller.backend = backend
    loop = ControllerLoop(cast(Controller, controller), period=HOUR)
    assert backend.tell is not None
    loop.start()
    try:
        assert controller.wait_cycles(1)
        backend.tell()  # a task ended
        assert controller.wait_cycles(2)
    finally:
        loop.stop()


def test_with_no_api_caller_the_rest_does_not_wait_out_the_cycle() -> None:
    """Others' pods on Kubernetes come from the cluster, not through this API: nobody to
    yield to, so a long cycle is followed after the plain rest."""
    assert rest_plan(took=0.5, rest=0.02, floor=0.02, api_active=False) == (0.02, 0.0)
    least, more = rest_plan(took=0.5, rest=0.2, floor=0.02, api_active=False)
    assert least == 0.02 and abs(more - 0.18) < 1e-9


class SlowController(FakeController):
    """Each cycle takes ``seconds`` and writes (so the plain rest is the floor); ``during``
    runs inside each cycle (an API request arriving)."""

    def __init__(self, seconds: float, during: Callable[[], None] = lambda: None) -> None:
        super().__init__([])
        self.seconds, self.during = seconds, during
        self.spans: list[tuple[float, float]] = []

    def run_cycle(self) -> None:
        started = time.monotonic()
        self.during()
        time.sleep(self.seconds)
        if self.on_written is not None:
            self.on_written(["job"])
        self.spans.append((started, time.monotonic()))
        super().run_cycle()


def _gaps(spans: list[tuple[float, float]]) -> list[float]:
    return [nxt[0] - cur[1] for cur, nxt in itertools.pairwise(spans)]


def test_while_api_requests_come_each_rest_lasts_the_cycle() -> None:
    holder: list[ControllerLoop] = []
    controller = SlowController(0.2, during=lambda: holder[0].saw_request())
    loop = ControllerLoop(cast(Controller, controller), period=HOUR)
    holder.append(loop)
    loop.start()
    try:
        assert controller.wait_cycles(4)
    finally:
        loop.stop()
    # a lower bound, whatever the machine's load: every rest waited out its cycle
    assert min(_gaps(controller.spans[:4])) >= 0.2 - 0.01


def test_without_api_requests_the_next_cycle_follows_after_the_floor() -> None:
    controller = SlowController(0.2)
    loop = ControllerLoop(cast(Controller, controller), period=HOUR)
    loop.start()
    try:
        assert controller.wait_cycles(5)
    finally:
        loop.stop()
    # the first cycle yields as before (callers may be waiting); after it, rests of the
    # floor: a rest as long as the cycle (0.2 s) would make every gap at least that
    assert min(_gaps(controller.spans[1:5])) < 0.2
