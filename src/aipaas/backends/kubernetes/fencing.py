"""Fencing tokens on Kubernetes: the highest token a controller has started anything with is
kept in the cluster, in a ConfigMap (``aipaas-fencing`` in the options' fencing namespace), and
a start whose token is lower is refused, as the other backends refuse it from their token file
(backends/fencing.py). The backend asks ``ClusterFence.admit`` before it hands a start to its
workers (backend.py ``start``).

The ConfigMap is written with its resourceVersion as a precondition, so two controllers
raising the mark at once cannot both win with different tokens. Unlike the token file, the
check and the pod's creation are two requests, not one locked step: a successor's first start
landing between them is not seen by that one start (Kubernetes offers no create conditioned
on another object). A read is reused for ``FRESH_SECONDS`` of the monotonic clock, which goes
on while a process is paused, so a controller that was stopped longer than that reads again
before its next start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from aipaas.backends.base import FencingRefused
from aipaas.backends.kubernetes.api import Conflict, KubeApi

log = logging.getLogger("aipaas.backends")

FENCE_NAME: Final = "aipaas-fencing"
TOKEN_KEY: Final = "token"
#: how long one read of the ConfigMap stands for the cluster's mark (seconds)
FRESH_SECONDS: Final = 0.5


class ClusterFence:
    """The highest fencing token started with on this cluster, read and raised through
    ``api`` (the calling thread's client)."""

    def __init__(
        self, api: Callable[[], KubeApi], namespace: str, fresh_seconds: float = FRESH_SECONDS
    ) -> None:
        self._api = api
        self.namespace = namespace
        self._fresh = fresh_seconds
        self._lock = threading.Lock()
        self._highest = 0  # the highest token read from or written to the cluster
        self._read_at = -float("inf")  # monotonic time of that read or write

    def admit(self, token: int | None, what: str) -> None:
        """Return when ``what`` may start under ``token``; raise ``FencingRefused`` when the
        cluster has seen a higher one. ``None`` (a controller without a lease: tests,
        ``simulate``) passes only while no controller with a lease ever started here."""
        with self._lock:
            if token is not None and token < self._highest:
                raise _refused(what, token, self._highest)
            fresh = time.monotonic() - self._read_at < self._fresh
            if fresh and (self._highest == (token or 0)):
                return
            while True:
                stored, version = self._read()
                if token is None or token <= stored:
                    if (token or 0) < stored:
                        raise _refused(what, token, stored)
                    return
                if self._raise_to(token, version):
                    return

    def _read(self) -> tuple[int, str | None]:
        """The cluster's mark and the ConfigMap's resourceVersion (None: no ConfigMap yet)."""
        found = self._api().get("ConfigMap", FENCE_NAME, self.namespace)
        stored = _token_of(found)
        self._note(stored)
        version = None if found is None else str(found["metadata"]["resourceVersion"])
        return stored, version

    def _raise_to(self, token: int, version: str | None) -> bool:
        """Write ``token`` as the mark, if the ConfigMap is still as read (``version``);
        False when someone wrote it meanwhile (read again)."""
        api = self._api()
        try:
            if version is None:
                api.create(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": FENCE_NAME, "namespace": self.namespace},
                        "data": {TOKEN_KEY: str(token)},
                    }
                )
            else:
                patch = {"metadata": {"resourceVersion": version}, "data": {TOKEN_KEY: str(token)}}
                api.patch("ConfigMap", FENCE_NAME, patch, self.namespace)
        except Conflict:
            return False
        self._note(token)
        return True

    def _note(self, stored: int) -> None:
        self._highest = max(self._highest, stored)
        self._read_at = time.monotonic()


def _token_of(config_map: dict[str, Any] | None) -> int:
    if config_map is None:
        return 0
    text = str((config_map.get("data") or {}).get(TOKEN_KEY) or "0")
    return int(text) if text.isdigit() else 0


def _refused(what: str, token: int | None, highest: int) -> FencingRefused:
    carried = "no token" if token is None else f"token {token}"
    log.warning("fencing: start of %s with %s refused (seen %d)", what, carried, highest)
    return FencingRefused(
        f"fencing: start of {what} carries {carried}, but this cluster has seen token {highest} "
        f"(a new store against a cluster another one ran: delete ConfigMap {FENCE_NAME})"
    )
