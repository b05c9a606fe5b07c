"""The controller's thread: cycles until stopped, while this process holds the controller
lease (when one is given).

How long it rests between cycles (``next_rest``, ``rest_plan``): a cycle that wrote something
(a task seen ended or started, a job placed or given a status: the cycle's ``on_written``) is
likely followed by more to do (the task it started ends, the next job of the slot starts), so
the next cycle comes after a short rest (``floor``); each quiet cycle after it rests twice as
long as the last, up to the ``period``: a short task's end is seen soon after its start, while
a loop with nothing to do (or only long tasks) is back to one cycle a period after a few
cycles. A write through the API of this process (``wake``) ends a rest early, and so does a
backend that says a task ended (its ``watch``: Ray's). Either way, when the API of this
process had a request during the cycle (``saw_request``), the rest lasts at least as long as
the cycle took: the API server in the same process keeps at least half of the time (and of
the GIL), and a flood of API writes cannot spin the loop. With no caller there is no one to
yield to: the rest is the plain one, and a backend whose work comes from elsewhere (others'
pods on Kubernetes) gets the controller's whole time. (Wall time,
not the cycle thread's CPU time: measured with 500 local jobs at once, a rest as long as the
CPU time alone cut the API's submissions per second by 40%.) The time the cycle spent blocked
on a backend that says so (``backend_waited``: the Ray backend waiting on its driver process,
which holds neither the CPU nor the GIL meanwhile) is not counted: the API ran freely then,
and counting it halved the rate at which a Ray cluster's slots were refilled.

Readiness (``is_ready``, the server's /readyz): ready while the loop is alive and moving: a
cycle has finished within ``stall_seconds`` (plus a period's rest), and the cycle running now
(if any) has not run longer than that. A cycle stuck on a backend or a file that never answers
makes the process not ready until it ends; one cycle once finished no longer means ready
forever."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from aipaas.controller.cycle import Controller
from aipaas.store.lease import Lease, LeaseLost

log = logging.getLogger("aipaas.controller")

#: the shortest rest after a cycle that wrote something, or when woken
FLOOR_SECONDS = 0.02
#: a cycle running longer than this, or none finished for this long (beyond a rest), makes
#: the process not ready (Settings.controller_stall_seconds)
STALL_SECONDS = 60.0


def next_rest(last: float, active: bool, period: float, floor: float) -> float:
    """The rest after a cycle, the cycle's own duration aside: ``floor`` after a cycle that
    wrote something (``active``), else twice the ``last`` rest, up to ``period``."""
    return floor if active else min(period, max(floor, last * 2))


def backend_waited(backend: object) -> float:
    """Seconds the backend has spent blocked waiting (a running total; 0: it does not say)."""
    return float(getattr(backend, "waited_seconds", 0.0))


def cycle_share(took: float, blocked: float) -> float:
    """What a cycle of ``took`` seconds held of the process: less the ``blocked`` seconds it
    waited on its backend (the API ran freely meanwhile)."""
    return max(0.0, took - blocked)


def rest_plan(
    took: float, rest: float, floor: float, api_active: bool = True
) -> tuple[float, float]:
    """A ``rest`` after a cycle that took ``took`` seconds, in two parts: the
    first, which no wake-up ends (only a stop), then the second, which a wake-up ends. Each
    lasts at least ``floor``, and the whole at least ``took`` when the API had a request
    during the cycle (``api_active``)."""
    least = max(floor, took) if api_active else floor
    return least, max(0.0, rest - least)


class ControllerLoop:
    def __init__(
        self,
        controller: Controller,
        period: float = 0.2,
        lease: Lease | None = None,
        housekeeping: Callable[[], None] | None = None,
        floor: float = FLOOR_SECONDS,
        stall_seconds: float = STALL_SECONDS,
    ) -> None:
        self.controller = controller
        self.period = period
        self.floor = min(floor, period)
        self.lease = lease
        if lease is not None:
            controller.lease = lease  # its writes and starts are fenced with this lease
        # Run after each cycle by the lease holder only (trimming events: one process does it).
        self.housekeeping = housekeeping
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by wake() and stop(): ends the wakeable rest
        self._wrote = False  # the running cycle wrote something (set from on_written)
        #: HTTP requests this process's API has taken (``saw_request``); a counter, not a
        #: flag, so that the loop thread only reads it (the event loop's thread adds)
        self._api_requests = 0
        self._rest = period  # the last rest (see next_rest)
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()
        self.stall_seconds = stall_seconds
        # Real time (time.monotonic), not the controller's clock: a stall is a real wait.
        # The start of the cycle running now (None between cycles), the end of the last one.
        self._cycle_started: float | None = None
        self._cycle_finished: float | None = None
        self._said_stalled = False
        # The cycle tells its listener which jobs it wrote; the loop listens too.
        listener = controller.on_written

        def on_written(uids: Sequence[str]) -> None:
            self._wrote = True
            if listener is not None:
                listener(uids)

        controller.on_written = on_written
        # A backend that can say when a task ended (Ray) wakes the loop: a short
        # task's end is seen without waiting out a quiet cycle's rest.
        watch = getattr(controller.backend, "watch", None)
        if callable(watch):
            watch(self.wake)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="aipaas-controller", daemon=True)
        self._thread.start()

    def saw_request(self) -> None:
        """The API took an HTTP request (from the event loop's thread; cheap: one addition):
        the controller yields the API time after its cycles while requests come."""
        self._api_requests += 1

    def wake(self) -> None:
        """Something was written that the controller acts on (a job created, cancelled or
        deleted; a queue changed): the next cycle comes without waiting out the rest (safe
        from any thread; cheap: API routes call it after each write)."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.controller.backend.close()
        if self.lease is not None:
            self.lease.release()

    def is_ready(self) -> bool:
        """Ready while this process's loop moves (``stalled`` says when it does not) and it has
        run a cycle, or another live process holds the lease (that process's readiness is its
        own)."""
        why = self.stalled()
        if why is not None:
            if not self._said_stalled:  # once per stall, not once per probe
                log.warning("not ready: %s", why)
                self._said_stalled = True
            return False
        self._said_stalled = False
        if self.ready.is_set():
            return True
        return self.lease is not None and self.lease.holder_now() not in (None, self.lease.holder)

    def stalled(self) -> str | None:
        """Why the loop counts as stuck now, or None: the running cycle has run longer than
        ``stall_seconds``, or no cycle has finished for ``stall_seconds`` plus a period (the
        longest rest) since the last one ended."""
        now = time.monotonic()
        started, finished = self._cycle_started, self._cycle_finished
        if started is not None and now - started > self.stall_seconds:
            return f"the controller's cycle has run for {now - started:.0f}s"
        if finished is not None and now - finished > self.stall_seconds + self.period:
            return f"no controller cycle has finished for {now - finished:.0f}s"
        return None

    def _run(self) -> None:
        clock = self.controller.clock
        backend = self.controller.backend
        requests_before_rest = -1  # the first cycle yields as before: callers may be waiting
        while not self._stop.is_set():
            started = clock.monotonic()
            waited = backend_waited(backend)
            # Cleared before the cycle reads the store: a write from now on wakes the next.
            self._wake.clear()
            self._wrote = False
            self._cycle_started = time.monotonic()
            try:
                if self.lease is None or self.lease.acquire():
                    self.controller.run_cycle()
                    self.ready.set()
                    if self.housekeeping is not None:
                        self.housekeeping()
                else:
                    self.ready.clear()  # another process runs the controller
            except LeaseLost as err:
                # Another process took the lease over during this cycle: what this one would
                # still have written or started was refused; the new holder carries on.
                log.warning("%s; the cycle stops here", err)
                self.ready.clear()
            except Exception:
                log.exception("controller cycle failed")  # the loop's top-level guard
            finally:
                self._cycle_finished, self._cycle_started = time.monotonic(), None
            self._rest = next_rest(self._rest, self._wrote, self.period, self.floor)
            took = cycle_share(clock.monotonic() - started, backend_waited(backend) - waited)
            # a request since the last rest began (it may still be answered, or more follow)
            seen, requests_before = self._api_requests, requests_before_rest
            requests_before_rest = seen
            least, more = rest_plan(took, self._rest, self.floor, seen != requests_before)
            if self._stop.wait(least):
                return
            self._wake.wait(more)
