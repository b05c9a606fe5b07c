"""Informers: one kind's objects kept in memory by list-then-watch, as client-go's reflector
keeps them, so that the backend answers from memory and never lists a cluster per cycle.

Each informer lists once (in pages), then watches from the list's resourceVersion with
bookmarks (so a quiet kind's version stays fresh and a re-watch does not fall behind the
server's window); a watch the server ends is resumed from the last version seen; a 410 Gone
(the version is older than the server keeps) lists again. Other errors (the server restarting,
a connection cut) are retried after a short pause, resuming where the watch left off.
The backend also writes through: an object it wrote is put in the cache at once (when newer
than what is there), so a cycle sees its own writes before the watch brings them.
Used by backends/kubernetes/backend.py; each informer runs in a daemon thread of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from aipaas.backends.kubernetes.api import ApiError, Gone, KubeApi

log = logging.getLogger("aipaas.backends.kubernetes")

Key = tuple[str, str]  # (namespace, name)


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _version(obj: Mapping[str, Any]) -> int:
    """An object's resourceVersion as a number. The API says it is opaque; etcd's are
    increasing integers, and the write-through only needs to know which of two copies of one
    object is newer (a non-number counts as oldest, so the watch's copy wins)."""
    text = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(text) if text.isdigit() else -1


class Informer:
    def __init__(
        self,
        api: KubeApi,
        kind: str,
        *,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        watch_seconds: int = 60,
        on_change: Callable[[], None] | None = None,
        version: str = "",
        index: Callable[[Mapping[str, Any]], str | None] | None = None,
    ) -> None:
        self.api = api.fork()
        #: the client is this informer's own (closed by its thread when it ends)
        self._own_client = self.api is not api
        self.kind = kind
        self.labels = labels
        self.fields = fields
        #: how long one watch request lasts before the server ends it and it is renewed
        self.watch_seconds = watch_seconds
        self.on_change = on_change
        self._objects: dict[Key, dict[str, Any]] = {}
        #: an index, as client-go's indexers: ``index(obj)`` -> the objects with that value
        #: (kept with every change, so a lookup by it is not a walk over every object)
        self._index_of = index
        self._indexed: dict[str, dict[Key, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        #: the resourceVersion the watch resumes from; given: the cache is taken as listed at
        #: that version (a watch resumed after a restart), and the first list is skipped
        self.version = version
        self._resume = bool(version)
        #: how many times the kind was listed (1 in a healthy life; more after 410 Gone)
        self.lists = 0
        #: how many watch events (bookmarks included) were read
        self.events = 0

    # -- reading -------------------------------------------------------------------------------

    def items(self) -> list[dict[str, Any]]:
        """The objects as last seen. Callers must not change them (copy first)."""
        with self._lock:
            return list(self._objects.values())

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get((namespace, name))

    def indexed(self, value: str) -> list[dict[str, Any]]:
        """The objects whose index value is ``value`` (none without an index)."""
        with self._lock:
            return list((self._indexed.get(value) or {}).values())

    def indexed_all(self) -> list[dict[str, Any]]:
        """Every object that has an index value."""
        with self._lock:
            return [obj for group in self._indexed.values() for obj in group.values()]

    # -- keeping objects and the index together (under the lock) --------------------------------

    def _put(self, key: Key, obj: dict[str, Any]) -> None:
        self._unindex(key)
        value = self._index_of(obj) if self._index_of is not None else None
        if value is not None:
            self._indexed.setdefault(value, {})[key] = obj
        self._objects[key] = obj

    def _drop(self, key: Key) -> None:
        self._unindex(key)
        self._objects.pop(key, None)

    def _unindex(self, key: Key) -> None:
        """The object now kept under ``key`` leaves the index (it is replaced or dropped)."""
        held = self._objects.get(key)
        value = self._index_of(held) if held is not None and self._index_of is not None else None
        group = self._indexed.get(value) if value is not None else None
        if group is None or value is None:
            return
        group.pop(key, None)
        if not group:
            del self._indexed[value]

    # -- writing through -----------------------------------------------------------------------

    def remember(self, obj: Mapping[str, Any]) -> None:
        """An object this process wrote (the server's answer): kept unless the cache has a
        newer copy already."""
        key = key_of(obj)
        with self._lock:
            held = self._objects.get(key)
            if held is None or _version(obj) >= _version(held):
                self._put(key, dict(obj))

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._drop((namespace, name))

    # -- the loop ------------------------------------------------------------------------------

    def start(self) -> Informer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"informer-{self.kind}", daemon=True
            )
            self._thread.start()
        return self

    def wait_synced(self, timeout: float = 30.0) -> bool:
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def stop(self) -> None:
        """The thread ends at its watch's next event or end. Its connection is never closed
        from here: closing a socket another thread reads frees its descriptor for reuse
        while that thread may still write to it."""
        self._stopped.set()

    def relist(self) -> None:
        items, version = self.api.list_with_version(
            self.kind, labels=self.labels, fields=self.fields
        )
        with self._lock:
            self._objects, self._indexed = {}, {}
            for obj in items:
                self._put(key_of(obj), obj)
            self.version = version
        self.lists += 1
        self._synced.set()
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def apply(self, event: Mapping[str, Any]) -> None:
        """One watch event into the cache."""
        self.events += 1
        kind, obj = event.get("type"), event.get("object") or {}
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if version:
            self.version = version
        if kind == "BOOKMARK":
            return
        key = key_of(obj)
        with self._lock:
            if kind == "DELETED":
                self._drop(key)
            else:
                held = self._objects.get(key)
                # a copy this process wrote may be newer than an event still on its way
                if held is None or _version(held) <= _version(obj):
                    self._put(key, obj)
        self._changed()

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            if self._own_client:
                self.api.close()

    def _loop(self) -> None:
        must_list = not self._resume
        pause = 0.2
        while not self._stopped.is_set():
            try:
                if must_list:
                    self.relist()
                    must_list = False
                for event in self.api.watch(
                    self.kind,
                    self.version,
                    timeout_seconds=self.watch_seconds,
                    labels=self.labels,
                    fields=self.fields,
                ):
                    if self._stopped.is_set():
                        return
                    self.apply(event)
                pause = 0.2
            except Gone:
                log.info("%s watch: version %s is gone, listing again", self.kind, self.version)
                must_list = True
            except ApiError as err:
                if err.code == 404:  # the kind is not served (a CRD not installed): look later
                    self._synced.set()
                    must_list = True
                    pause = 10.0
                else:
                    log.warning("%s watch: %s", self.kind, err)
                if self._stopped.wait(pause):
                    return
                pause = min(pause * 2, 5.0)
            except Exception as err:  # a connection cut, the server restarting
                if self._stopped.is_set():
                    return
                # said once, not at every retry while the server is away
                say = log.warning if pause <= 0.2 else log.debug
                say("%s watch: %s: %s", self.kind, type(err).__name__, err)
                if self._stopped.wait(pause):
                    return
                pause = min(pause * 2, 5.0)
                if not self.version:
                    must_list = True


def start_all(informers: Mapping[str, Informer], timeout: float = 60.0) -> None:
    """Start the informers and wait until each has listed once."""
    for informer in informers.values():
        informer.start()
    deadline = time.monotonic() + timeout
    for informer in informers.values():
        if not informer.wait_synced(max(deadline - time.monotonic(), 0.1)):
            raise TimeoutError(f"the {informer.kind} informer did not list in {timeout:.0f} s")
