"""Stops are fenced, every start of a controller with a lease carries its token, and "unknown"
never confirms the stop of an attempt the backend once reported running (issue 10)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from aipaas.backends.base import FencingRefused, LaunchRequest, TaskState, TaskStatus
from aipaas.backends.fencing import Fenced, TokenFile
from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from aipaas.controller.loop import ControllerLoop
from aipaas.store.lease import Lease, LeaseLost
from tests.support.ctl_world import World
from tests.unit.controller.test_at_most_once import Faulty, faulty, task_phases, tasks

TTL = 0.5


class Paused(Faulty):
    """A backend whose status call runs ``pause`` once, when it is set (the controller's
    process paused in the middle of a cycle, long enough for its lease to be taken over)."""

    def __init__(self, inner: SimBackend) -> None:
        super().__init__(inner)
        self.pause: Callable[[], None] | None = None

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        pause, self.pause = self.pause, None
        if pause is not None:
            pause()
        return super().status(request_ids)


def request(tmp: Path, rid: str, token: int | None) -> LaunchRequest:
    return LaunchRequest(
        rid, "w-0", "j", "acme", "sim-dgx-0", ("train",), {}, None, (0,), 1000,
        str(tmp / "w.log"), fencing_token=token,
    )  # fmt: skip


class TestFencedStops:
    def test_a_controller_that_lost_its_lease_sends_no_stop(
        self, world: World, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.WARNING)
        world.setup()
        backend = Paused(SimBackend(world.tmp / "run", load_cluster(), default_duration=600))
        controller = world.controller(backend, inventory_seconds=0)
        lease_a = Lease(world.store, "elsewhere:a:x", ttl=TTL)  # not this host: no shortcut
        lease_b = Lease(world.store, "elsewhere:b:x", ttl=TTL)
        assert lease_a.acquire()
        controller.lease = lease_a
        world.submit("a", tasks(replicas=2))
        controller.run_cycle()
        assert task_phases(world, "a") == ["Running", "Running"]

        def taken_over() -> None:  # A pauses past its ttl; B takes the lease over
            time.sleep(TTL * 1.5)
            assert lease_b.acquire()

        world.service.cancel("a", "acme")
        backend.pause = taken_over
        loop = ControllerLoop(controller, period=0.05, lease=lease_a)
        loop.start()
        try:
            deadline = time.monotonic() + 10
            while backend.pause is not None or lease_b.token is None:
                assert time.monotonic() < deadline, "the pause never happened"
                time.sleep(0.05)
            time.sleep(0.5)  # A's cycle goes on after the pause, and its next ones are refused
        finally:
            loop.stop()
        assert backend.stop_asked == []  # A asked for none of the stops it would have sent
        assert lease_b.token == 2  # B took the lease over (token raised)
        messages = [r.getMessage() for r in caplog.records]
        assert any(m.startswith("fencing: elsewhere:a:x lost") for m in messages), messages
        assert any("fencing:" in m and "the cycle stops here" in m for m in messages)
        answers = backend.inner.status(backend.starts)
        assert [a.state for a in answers.values()] == [TaskState.RUNNING] * 2

    def test_stops_are_sent_after_the_stopping_mark_is_durable(self, world: World) -> None:
        world.setup()
        clock = VirtualClock()
        controller, backend = faulty(world, clock)
        controller.lease = Lease(world.store, "elsewhere:a:x", ttl=60)
        assert controller.lease.acquire()
        world.submit("a", tasks())
        controller.run_cycle()
        backend.slow_stop = True
        world.service.cancel("a", "acme")
        controller.run_cycle()
        assert backend.stop_asked == backend.starts
        records = controller.tasks.for_job(world.job("a").metadata.uid or "")
        assert [r.stopping for r in records] == [True]


class TestTokens:
    def test_a_controller_with_a_lease_but_no_token_starts_nothing(self, world: World) -> None:
        world.setup()
        clock = VirtualClock()
        controller, backend = faulty(world, clock)
        lease = Lease(world.store, "elsewhere:a:x", ttl=60)
        assert lease.acquire()
        controller.lease = lease
        drop = backend.inner.start
        backend.inner.start = lambda request: None  # type: ignore[method-assign]
        world.submit("a", tasks())
        controller.run_cycle()  # records committed, the start lost (a crash in between)
        backend.inner.start = drop  # type: ignore[method-assign]
        assert task_phases(world, "a") == ["Starting"] and len(backend.starts) == 1
        lease.token = None  # its token is unknown (as after a lease found lost)
        with pytest.raises(LeaseLost, match="fencing: elsewhere:a:x has no token"):
            controller.run_cycle()  # the start asked again would carry no token
        assert len(backend.starts) == 1

    def test_a_start_without_a_token_is_refused_once_a_token_was_seen(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.WARNING)
        tokens = TokenFile(tmp_path / "fence")
        with tokens.admit(None, "a"):  # no controller with a lease ever came: let through
            pass
        assert not (tmp_path / "fence").exists()
        with tokens.admit(2, "b"):
            pass
        refused = pytest.raises(FencingRefused, match="carries no token, but this backend has")
        with refused, tokens.admit(None, "c"):
            raise AssertionError("a start without a token went through")
        assert tokens.highest() == 2
        assert any(r.getMessage().startswith("fencing: start of c") for r in caplog.records)

    def test_backends_refuse_a_start_without_a_token_after_one_with(self, tmp_path: Path) -> None:
        sim = SimBackend(tmp_path / "sim", load_cluster())
        sim.start(request(tmp_path, "u.w-0.0", None))  # tests and ``simulate``: no lease
        sim.start(request(tmp_path, "u.w-1.0", 1))
        with pytest.raises(FencingRefused):
            sim.start(request(tmp_path, "u.w-2.0", None))
        assert sim.status(["u.w-2.0"])["u.w-2.0"].state is TaskState.UNKNOWN
        fenced = Fenced(SimBackend(tmp_path / "other", load_cluster()), TokenFile(tmp_path / "f"))
        fenced.start(request(tmp_path, "u.w-0.0", 3))
        with pytest.raises(FencingRefused):
            fenced.start(request(tmp_path, "u.w-1.0", None))
        assert sim.fencing.highest() == 1


class TestUnknownConfirmsNothingOfWhatRan:
    def test_a_task_seen_running_then_unknown_is_not_replaced_while_it_runs(
        self, world: World
    ) -> None:
        world.setup()
        clock = VirtualClock()
        controller, backend = faulty(world, clock)
        world.submit("a", tasks(extra="      restartPolicy: OnFailure\n"))
        controller.run_cycle()
        first = backend.starts[0]
        assert task_phases(world, "a") == ["Running"]
        backend.forget.add(first)  # from now on "unknown", though it still runs
        backend.slow_stop = True
        for _ in range(6):
            clock.advance(10)  # far past the backoff
            controller.run_cycle()
        assert backend.stop_asked[:1] == [first]
        assert backend.starts == [first]  # no second attempt while the first runs
        assert backend.inner.status([first])[first].state is TaskState.RUNNING
        backend.forget.clear()
        backend.let_stop()
        controller.run_cycle()  # stop confirmed by an end the backend reports
        clock.advance(10)
        controller.run_cycle()
        assert len(backend.starts) == 2 and backend.starts[1].endswith(".1")

    def test_a_cancelled_job_whose_task_became_unknown_waits(self, world: World) -> None:
        world.setup()
        clock = VirtualClock()
        controller, backend = faulty(world, clock)
        world.submit("a", tasks())
        controller.run_cycle()
        backend.slow_stop = True
        backend.forget.update(backend.starts)
        world.service.cancel("a", "acme")
        for _ in range(4):
            controller.run_cycle()
        status = world.job("a").status
        assert status is not None and status.reason == "Stopping"
