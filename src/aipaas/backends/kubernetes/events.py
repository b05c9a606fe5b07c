"""Events on pods, written as kube-scheduler writes them (events.k8s.io/v1): ``Scheduled``
(Normal, action Binding, "Successfully assigned NS/POD to NODE") when aipaas binds a pod, and
``FailedScheduling`` (Warning, action Scheduling) with aipaas's reason while a pod waits, so
that ``kubectl describe pod`` and ``kubectl events`` say why.

Writing is done off the scheduling path by one thread (as client-go's event broadcaster does):
a bind never waits for its event, and an event that cannot be written is dropped with a log
line, never retried into the cycle. A repeated FailedScheduling with the same note for the
same pod is written once, and a pod's changed note at most every ``REPEAT_SECONDS`` (while
many pods wait, the counts in their notes change with every binding: kube-scheduler, too,
retries a pod that failed no sooner than its backoff, at most 10 s by default, so it writes
no more often). Used by backends/kubernetes/backend.py.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from aipaas.backends.kubernetes.api import KubeApi

log = logging.getLogger("aipaas.backends.kubernetes")

REPORTING_CONTROLLER: Final = "aipaas"
_NOTE_LIMIT: Final = 1024  # the API refuses a note over 1 kB
#: a pod's FailedScheduling with a new note waits this long after its last one (the callers
#: tell a waiting pod its reason again every few seconds: the newest is written then)
REPEAT_SECONDS: Final = 10.0


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pod_event(
    pod: Mapping[str, Any],
    *,
    reason: str,
    note: str,
    action: str,
    warning: bool,
    instance: str,
) -> dict[str, Any]:
    """An events.k8s.io/v1 Event about ``pod``, named as client-go names them (the object's
    name and a hex timestamp)."""
    meta = pod["metadata"]
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{time.time_ns():x}",
            "namespace": meta["namespace"],
        },
        "eventTime": _micro_time(),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance,
        "action": action,
        "reason": reason,
        "type": "Warning" if warning else "Normal",
        "note": note[:_NOTE_LIMIT],
        "regarding": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
    }


def scheduled_note(pod: Mapping[str, Any], node: str) -> str:
    meta = pod["metadata"]
    return f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}"


class EventSink:
    """A queue of events and the thread that writes them."""

    def __init__(self, api: KubeApi, instance: str | None = None) -> None:
        self.api = api.fork()
        self._own_client = self.api is not api
        self.instance = instance or f"aipaas-{socket.gethostname()}-{os.getpid()}"
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=10000)
        #: pod uid -> the last FailedScheduling note written, and when (monotonic seconds)
        self._last_note: dict[str, tuple[str, float]] = {}
        self._thread = threading.Thread(target=self._run, name="kube-events", daemon=True)
        self._thread.start()
        self.written = 0

    def scheduled(self, pod: Mapping[str, Any], node: str) -> None:
        self._last_note.pop(str(pod["metadata"].get("uid")), None)
        self._put(
            pod_event(
                pod,
                reason="Scheduled",
                note=scheduled_note(pod, node),
                action="Binding",
                warning=False,
                instance=self.instance,
            )
        )

    def failed_scheduling(self, pod: Mapping[str, Any], note: str) -> None:
        uid = str(pod["metadata"].get("uid"))
        now = time.monotonic()
        last = self._last_note.get(uid)
        if last is not None and (last[0] == note or now - last[1] < REPEAT_SECONDS):
            return
        self._last_note[uid] = (note, now)
        self._put(
            pod_event(
                pod,
                reason="FailedScheduling",
                note=note,
                action="Scheduling",
                warning=True,
                instance=self.instance,
            )
        )

    def _put(self, event: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            log.warning("event dropped (the queue is full): %s", event["note"])

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                if self._own_client:  # a client of its own, used by this thread only
                    self.api.close()
                return
            try:
                self.api.create(event)
                self.written += 1
            except Exception as err:  # an event is advice: never let it fail the scheduler
                log.info("event on %s not written: %s", event["regarding"]["name"], err)
            finally:
                self._queue.task_done()

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until the queued events are written (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)

    def close(self) -> None:
        self.flush(2.0)
        self._queue.put(None)
