"""The Ray backend the controller holds: a proxy to a Ray driver in a process of its own.

Why a process: a Ray driver whose cluster head (GCS) dies blocks in its next Ray call and, 60 s
later, Ray ends the whole process ("Failed to connect to GCS ... The program will terminate"):
in the server's process that would take the API down with the cluster. Here only the driver
process (driver.py, started with ``spawn``; the server never imports ray) goes; each call
waits at most its timeout, and a driver that does not answer is killed and started again at a
later call (not before ``retry_seconds``). Meanwhile calls raise, which the controller takes as
"unreachable" (nothing concluded, no task given up), as the Backend interface asks.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from aipaas.backends.base import Inventory, LaunchRequest, TaskStatus
from aipaas.backends.ray.datasets import RayDatasetCaches
from aipaas.backends.ray.driver_process import serve
from aipaas.backends.ray.records import TaskRecords

log = logging.getLogger(__name__)

#: a new driver imports ray and connects: about 3 s here, ray.init's own timeout about 30 s
CONNECT_SECONDS = 60.0


class RayUnreachable(RuntimeError):
    """The Ray driver did not answer (the cluster unreachable, the driver restarting)."""


class RayBackend(RayDatasetCaches):  # datasets: ray/datasets.py
    name = "ray"
    #: a gang is one placement group: starts carry their gang (backends/gang.py, groups.py)
    places_gangs = True

    def __init__(
        self,
        run_dir: Path,
        address: str | None = None,
        *,
        call_seconds: float = 15.0,
        connect_seconds: float = CONNECT_SECONDS,
        ready_seconds: float = 5.0,
        retry_seconds: float = 10.0,
        **driver_options: Any,
    ) -> None:
        """Args:
        run_dir: the driver's records of the tasks it started (records.py).
        address: the Ray cluster (``host:port`` of its GCS); None: RAY_ADDRESS or a local one.
        call_seconds: the most one call waits for the driver (after its first connection).
        connect_seconds: how long a new driver may take to connect (import ray, join the
            cluster) before it is given up.
        ready_seconds: the most one call waits for a new driver to be connected (the first
            driver of the backend: up to ``connect_seconds``).
        retry_seconds: after a driver failed, how long calls fail at once before a new one.
        driver_options: passed to ``RayDriver`` (poll_seconds, start_seconds, task_root).
        """
        self._records = TaskRecords(run_dir)  # the driver's, read-only here
        self.run_dir = self._records.run_dir
        self.address = address
        self.call_seconds = call_seconds
        self.connect_seconds = connect_seconds
        self.ready_seconds = ready_seconds
        self._spawned_at = 0.0
        self._ever_connected = False
        self.retry_seconds = retry_seconds
        self._options = driver_options
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._connected = False  # the current driver has answered once
        self._failed_at: float | None = None
        self._lock = threading.Lock()
        #: seconds spent blocked waiting for the driver's answers (the controller's loop does
        #: not count them as its own: controller/loop.py)
        self.waited_seconds = 0.0
        self._unanswered = 0  # calls sent to the current driver whose answers are not read
        #: told when the driver says a task ended (``watch``)
        self._on_change: Callable[[], None] | None = None

    # the Backend interface ----------------------------------------------------------------

    def inventory(self) -> Inventory:
        result: Inventory = self.with_cache_states(self._call("inventory"))  # node_datasets.py
        return result

    def start(self, request: LaunchRequest) -> None:
        # Already submitted (the controller asks again while Ray has not started it): the
        # driver's records say so, read here without a round trip to the driver.
        if self._records.has(request.request_id, "created"):
            return
        # Not awaited: the driver answers in order, and a later call reads the answer first.
        # A start the driver refuses (no such node, a group larger than its node) is recorded
        # there as lost with the reason, which the task's status then says; a start that never
        # reached a driver (it died) leaves the task unknown, and the controller asks again.
        self._send("start", self.stage_actor(request))  # its datasets first

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        self._call("stop", request_id, grace_seconds)

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        result: dict[str, TaskStatus] = self._call("status", list(request_ids))
        return result

    def watch(self, on_change: Callable[[], None]) -> None:
        """``on_change`` is called (from a thread of the backend's) when a task ended in Ray:
        the controller's loop wakes up for it instead of waiting out its rest."""
        self._on_change = on_change

    def close(self) -> None:
        """Ends the driver process; the actors are detached and keep running."""
        with self._lock:
            if self._conn is not None and self._process is not None and self._process.is_alive():
                try:
                    self._conn.send(("close", ()))
                    if self._conn.poll(5):
                        self._conn.recv()
                except (OSError, EOFError):
                    pass
            self._end_driver()

    @property
    def driver_pid(self) -> int | None:
        """The driver process's id (tests kill it)."""
        return self._process.pid if self._process is not None else None

    # helpers ------------------------------------------------------------------------------

    def _send(self, method: str, *args: Any) -> None:
        """A call whose answer is not awaited (read, and only logged, by the next ``_call``)."""
        with self._lock:
            conn = self._ready_driver()
            try:
                conn.send((method, args))
            except (OSError, EOFError) as err:
                self._failed(err)
                raise RayUnreachable(f"the Ray driver is gone ({err!r})") from err
            self._unanswered += 1

    def _call(self, method: str, *args: Any) -> Any:
        with self._lock:
            conn = self._ready_driver()
            try:
                conn.send((method, args))
                kind, value = self._answer(conn, method)
                while self._unanswered:  # answers come in order: the calls sent before first
                    if kind == "error":
                        log.warning("ray backend: the driver refused a start: %s", value)
                    self._unanswered -= 1
                    kind, value = self._answer(conn, method)
            except (OSError, EOFError, RayUnreachable) as err:
                self._failed(err)
                if isinstance(err, RayUnreachable):
                    raise
                raise RayUnreachable(f"the Ray driver is gone ({err!r})") from err
            if kind == "error":
                exception: Exception = value
                raise exception
            return value

    def _ready_driver(self) -> Connection:
        """The driver's connection once it has said "ready" (called holding the lock)."""
        conn = self._driver()
        if not self._connected:
            self._await_ready(conn)
        return conn

    def _answer(self, conn: Connection, method: str) -> tuple[str, Any]:
        timeout = self.call_seconds
        began = time.monotonic()
        answered = conn.poll(timeout)
        self.waited_seconds += time.monotonic() - began
        if not answered:
            raise RayUnreachable(f"the Ray driver did not answer {method} in {timeout:g} s")
        kind, value = conn.recv()
        return str(kind), value

    def _await_ready(self, conn: Connection) -> None:
        """A new driver connects to Ray on its own and says "ready": a call waits for that at
        most ``ready_seconds`` (the controller is not held up while Ray is unreachable), and a
        driver still not connected after ``connect_seconds`` is given up."""
        # The first driver of this backend may take its time (the server is starting: its
        # first inventory should see the nodes); a later one, after a failure, may not.
        wait = self.connect_seconds if not self._ever_connected else self.ready_seconds
        try:
            if conn.poll(wait):
                kind, value = conn.recv()
                if kind == "ready":
                    self._connected = self._ever_connected = True
                    return
                raise RayUnreachable(f"the Ray driver could not connect: {value}")
        except (OSError, EOFError) as err:
            self._failed(err)
            raise RayUnreachable(f"the Ray driver is gone ({err!r})") from err
        except RayUnreachable as err:
            self._failed(err)
            raise
        waited = time.monotonic() - self._spawned_at
        if waited > self.connect_seconds:
            late = RayUnreachable(f"the Ray driver did not connect in {waited:.0f} s")
            self._failed(late)
            raise late
        raise RayUnreachable(f"the Ray driver is connecting to Ray ({waited:.0f} s)")

    def _driver(self) -> Connection:
        if self._conn is not None and self._process is not None and self._process.is_alive():
            return self._conn
        if self._conn is not None:
            self._failed(RuntimeError(f"exit code {self._process and self._process.exitcode}"))
        if self._failed_at is not None and time.monotonic() - self._failed_at < self.retry_seconds:
            raise RayUnreachable("the Ray driver failed lately; it is started again shortly")
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        heard, told = context.Pipe(duplex=False)  # the driver's word of tasks' ends
        process = context.Process(
            target=serve,
            args=(theirs, self.run_dir, self.address, self._options, told),
            name="aipaas-ray-driver",
            daemon=True,
        )
        process.start()
        theirs.close()
        told.close()
        threading.Thread(
            target=self._relay, args=(heard,), name="aipaas-ray-changes", daemon=True
        ).start()
        self._process, self._conn, self._connected = process, ours, False
        self._spawned_at = time.monotonic()
        return ours

    def _relay(self, heard: Connection) -> None:
        """Until its driver is gone: each word of an end calls ``on_change``."""
        with heard:
            while True:
                try:
                    heard.recv()
                except (EOFError, OSError):
                    return
                on_change = self._on_change
                if on_change is not None:
                    on_change()

    def _failed(self, err: BaseException) -> None:
        log.warning("ray backend: the Ray driver failed (%s); started again later", err)
        self._failed_at = time.monotonic()
        self._end_driver()

    def _end_driver(self) -> None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        self._connected = False
        self._unanswered = 0
        if conn is not None:
            conn.close()
        if process is not None:
            process.join(1)
            if process.is_alive():
                process.kill()
                process.join(5)
