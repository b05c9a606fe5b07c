"""Copying pods' logs (``pods/log``) into the tasks' log files, which is where the server
reads every backend's logs from (``aipaas logs``).

A pod that ended is copied whole, in the caller's thread, before its end is answered (three
tries at most: a node without a kubelet has no log to give). A running pod is copied every
``log_seconds``; with a thread of its own (``background``) those copies run there, not in the
controller's cycle, and at most ``READS_PER_SECOND`` of them a second on average (bursts of
``READS_AT_ONCE``): each read is a request the API server passes on to a kubelet, and with
thousands of running pods copying each every few seconds would be more requests than
scheduling them. A running pod's log file therefore lags by up to
``running pods / READS_PER_SECOND`` seconds. Without the thread (tests) up to
``READS_AT_ONCE`` running pods are copied per call, in the caller's thread.

Who calls it: backend.py's ``status`` (``copy``) and ``close``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

from aipaas.backends.kubernetes import manifests as m
from aipaas.backends.kubernetes.api import KubeApi

log = logging.getLogger("aipaas.backends.kubernetes")

#: running pods' logs read at once at most (a burst), and on average per second
READS_AT_ONCE: Final = 20
READS_PER_SECOND: Final = 4.0


class LogCopier:
    def __init__(self, api: KubeApi, log_seconds: float, *, background: bool) -> None:
        self.api = api
        self.log_seconds = log_seconds
        self._pool = ThreadPoolExecutor(1, "kube-logs") if background else None
        self._client = api.fork() if background else api
        self._copied: dict[str, float] = {}  # request id -> when (inf: the end's, done)
        self._failures: dict[str, int] = {}
        self._reading: dict[str, Future[None]] = {}  # running pods' copies under way
        self._budget = float(READS_AT_ONCE)
        self._budget_at = time.monotonic()

    def begin_call(self) -> None:
        """A status call begins: the running pods' reads it may start."""
        now = time.monotonic()
        if self._pool is None:
            self._budget = READS_AT_ONCE
        else:
            gained = (now - self._budget_at) * READS_PER_SECOND
            self._budget = min(float(READS_AT_ONCE), self._budget + gained)
        self._budget_at = now

    def copy(self, rid: str, pod: Mapping[str, Any], ended: bool) -> None:
        """The pod's log into its task's log file, when it is due (see the module)."""
        meta = pod["metadata"]
        path = (meta.get("annotations") or {}).get(m.LOG_ANNOTATION)
        last = self._copied.get(rid)
        if not path or not pod["spec"].get("nodeName") or last == float("inf"):
            return
        now = time.monotonic()
        if ended:
            under_way = self._reading.pop(rid, None)
            if under_way is not None:  # an older text must not land after the whole one
                with contextlib.suppress(Exception):
                    under_way.result(timeout=60)
            self._read(rid, meta["name"], meta["namespace"], Path(path), ended=True)
            return
        if last is not None and now - last < self.log_seconds:
            return
        if self._budget < 1 or rid in self._reading:
            return
        self._budget -= 1
        if self._pool is None:
            self._read(rid, meta["name"], meta["namespace"], Path(path), ended=False)
            return
        self._copied[rid] = now  # not asked again before log_seconds, even if it fails
        future = self._pool.submit(
            self._read, rid, meta["name"], meta["namespace"], Path(path), ended=False
        )
        self._reading[rid] = future
        future.add_done_callback(lambda _: self._reading.pop(rid, None))

    def _read(self, rid: str, name: str, namespace: str, target: Path, *, ended: bool) -> None:
        api = self._client if self._pool is not None and not ended else self.api
        try:
            text = api.log(name, namespace)
        except Exception as err:  # a pod whose container has not started has no log yet
            log.debug("no log for %s yet: %s", name, err)
            failures = self._failures.get(rid, 0) + 1
            self._failures[rid] = failures
            # an ended pod's log is tried a few times more, then given up (no kubelet has it)
            self._copied[rid] = float("inf") if ended and failures >= 3 else time.monotonic()
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        self._copied[rid] = float("inf") if ended else time.monotonic()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._client.close()
