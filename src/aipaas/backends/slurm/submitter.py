"""``sbatch`` calls off the controller's thread, several at once.

One ``sbatch`` takes a few tenths of a second (a round trip to slurmctld); a cycle that starts
eight tasks one after another held the controller (and, since the loop rests as long as a
cycle took, the next cycle) for seconds. A start now writes the task's script, hands the call
to a small pool and returns; the job id is written to the attempt's directory when ``sbatch``
answers, or the error (``submit-error``) when it fails. Until then the backend reports the
task as not yet started ("being submitted"), as it does a job pending in Slurm.

Crash safety is unchanged: the job carries the attempt's name, so a server that died with a
call in flight finds the job by name (or submits it, if the call never reached Slurm). A stop
of a task still being submitted waits for its ``sbatch`` first, so that it cancels the job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

Write = Callable[[Path, str], None]

log = logging.getLogger("aipaas.backends")

SUBMIT_ERROR = "submit-error"
#: concurrent sbatch calls: slurmctld serves RPCs on threads of its own; an 8-task gang is
#: submitted in one round (each call mostly waits for slurmctld)
WORKERS = 8


class Submitter:
    def __init__(
        self, submit: Callable[[Sequence[str], Path], int], write: Write, workers: int = WORKERS
    ) -> None:
        """``workers``: concurrent calls; 0: each call made at once in the caller's thread."""
        self._submit = submit
        self._write = write
        self._workers = workers
        self._pool = self._new_pool() if workers > 0 else None
        self._lock = threading.Lock()
        self._in_flight: dict[str, Future[None]] = {}
        #: called (from a pool thread) after each job id is written down
        self.on_submitted: Callable[[], None] = lambda: None

    def submit(self, request_id: str, directory: Path, args: Sequence[str], script: Path) -> None:
        if self._pool is None:
            self._call(request_id, directory, list(args), script)
            return
        with self._lock:
            if request_id in self._in_flight:
                return
            future = self._pool.submit(self._call, request_id, directory, list(args), script)
            self._in_flight[request_id] = future
        future.add_done_callback(lambda _: self._done(request_id))

    def in_flight(self, request_id: str) -> bool:
        with self._lock:
            return request_id in self._in_flight

    def wait(self, request_id: str, timeout: float = 60.0) -> None:
        """Until the task's ``sbatch`` has answered (at most ``timeout`` seconds)."""
        with self._lock:
            future = self._in_flight.get(request_id)
        if future is not None:
            future.exception(timeout)  # its outcome is on disk; errors never escape _call

    def close(self) -> None:
        """Waits for the calls in flight (their job ids are written down)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = self._new_pool()  # the backend may be used again after close

    def _new_pool(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="aipaas-sbatch")

    def _call(self, request_id: str, directory: Path, args: list[str], script: Path) -> None:
        try:
            job_id = self._submit(args, script)
        except Exception as err:  # the controller learns it from the status: lost
            log.warning("sbatch of %s failed: %s", request_id, err)
            self._write(directory / SUBMIT_ERROR, f"sbatch failed: {err}"[:500])
            return
        self._write(directory / "job", str(job_id))
        log.info("submitted %s as Slurm job %d", request_id, job_id)
        self.on_submitted()

    def _done(self, request_id: str) -> None:
        with self._lock:
            self._in_flight.pop(request_id, None)
