"""The controller's thread: one cycle every ``period`` seconds until stopped, while this
process holds the controller lease (when one is given)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from aipaas.controller.cycle import Controller
from aipaas.store.lease import Lease, LeaseLost

log = logging.getLogger("aipaas.controller")


class ControllerLoop:
    def __init__(
        self,
        controller: Controller,
        period: float = 0.2,
        lease: Lease | None = None,
        housekeeping: Callable[[], None] | None = None,
    ) -> None:
        self.controller = controller
        self.period = period
        self.lease = lease
        if lease is not None:
            controller.lease = lease  # its writes and starts are fenced with this lease
        # Run after each cycle by the lease holder only (trimming events: one process does it).
        self.housekeeping = housekeeping
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="aipaas-controller", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.controller.backend.close()
        if self.lease is not None:
            self.lease.release()

    def is_ready(self) -> bool:
        """Ready once this process has run a cycle, or another live process holds the lease."""
        if self.ready.is_set():
            return True
        return self.lease is not None and self.lease.holder_now() not in (None, self.lease.holder)

    def _run(self) -> None:
        clock = self.controller.clock
        while not self._stop.is_set():
            started = clock.monotonic()
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
            # Rest at least as long as the cycle took: under load the API keeps half the time.
            self._stop.wait(max(self.period, clock.monotonic() - started))
