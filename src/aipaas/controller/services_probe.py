"""Health checks of service replicas, run beside the controller's cycle (never inside it).

A probe is an HTTP GET (a 2xx or 3xx within its timeout passes) or, for a replica whose
service gives no readiness probe, a TCP connection to its port. Probes run on a few worker
threads; the cycle starts the ones that are due and reads the answers that came, so a slow
replica never slows the controller. Consecutive passes and failures are counted per replica
and kind against the probe's thresholds.
"""

from __future__ import annotations

import socket
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from aipaas.api.service import HttpProbe

READY = "readiness"
LIVE = "liveness"
#: the TCP check of a replica without a readiness probe
TCP_CHECK = HttpProbe(path="/", period_seconds=0.5, timeout_seconds=0.5, failure_threshold=1)


@dataclass
class ProbeState:
    passes: int = 0
    failures: int = 0
    last_started: float = -1e18
    last_reason: str = ""
    running: Future[str | None] | None = None


class Prober:
    def __init__(self, workers: int = 8) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="aipaas-probe")
        self._states: dict[tuple[str, str], ProbeState] = {}

    def check(
        self,
        replica: str,
        kind: str,
        probe: HttpProbe | None,
        address: str,
        port: int,
        *,
        started_at: float,
    ) -> ProbeState:
        """Collect a finished probe of ``replica`` and start the next when it is due; the
        counts so far. ``probe`` None: a TCP check."""
        state = self._states.setdefault((replica, kind), ProbeState())
        if state.running is not None and state.running.done():
            problem = state.running.result()
            state.running = None
            if problem is None:
                state.passes, state.failures, state.last_reason = state.passes + 1, 0, ""
            else:
                state.passes, state.failures, state.last_reason = 0, state.failures + 1, problem
        used = probe or TCP_CHECK
        now = time.time()
        due = now - state.last_started >= used.period_seconds
        if state.running is None and due and now >= started_at + used.initial_delay_seconds:
            state.last_started = now
            if probe is None:
                state.running = self._pool.submit(_tcp, address, port, used.timeout_seconds)
            else:
                url = f"http://{_host(address)}:{port}{probe.path}"
                state.running = self._pool.submit(_http, url, probe.timeout_seconds)
        return state

    def forget(self, replica: str) -> None:
        for kind in (READY, LIVE):
            self._states.pop((replica, kind), None)

    def known(self) -> set[str]:
        return {replica for replica, _ in self._states}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def _http(url: str, timeout: float) -> str | None:
    """None when the probe passes, else why it failed."""
    try:
        answer = httpx.get(url, timeout=timeout, follow_redirects=False)
    except httpx.HTTPError as err:
        return f"{type(err).__name__}: {err}"[:200]
    if 200 <= answer.status_code < 400:
        return None
    return f"HTTP {answer.status_code}"


def _tcp(address: str, port: int, timeout: float) -> str | None:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return None
    except OSError as err:
        return f"no connection to port {port}: {err}"[:200]
