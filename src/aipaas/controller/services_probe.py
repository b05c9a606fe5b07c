"""Probes of service replicas, run beside the controller's cycle (never inside it): the
services' step (controller/services_reconcile.py) asks for each replica's startup, readiness
and liveness probes every cycle.

A probe is Kubernetes' (api/service.py ``Probe``): an HTTP GET (a status of 200 to 399 within
its timeout passes), a TCP connection, or a command run beside the replica by its backend
(backends/probe_exec.py). A replica whose service gives no readiness probe is checked with a
TCP connection to its port. Probes run on a few worker threads; the cycle starts those that
are due (first ``initialDelaySeconds`` after the replica started, then every
``periodSeconds``) and reads the answers that came, so a slow replica never slows the
controller. Consecutive passes and failures are counted per replica and kind against the
probe's thresholds.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from aipaas.api.service import Probe, TcpSocketAction

STARTUP = "startup"
READY = "readiness"
LIVE = "liveness"
KINDS = (STARTUP, READY, LIVE)
#: the TCP check of a replica without a readiness probe
TCP_CHECK = Probe(
    tcp_socket=TcpSocketAction(), period_seconds=0.5, timeout_seconds=0.5, failure_threshold=1
)
#: runs an exec probe's command beside the replica: None when it passed, else why not
ExecRunner = Callable[[Sequence[str], float], str | None]


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
        probe: Probe | None,
        address: str,
        port: int,
        *,
        started_at: float,
        run_exec: ExecRunner | None = None,
    ) -> ProbeState:
        """Collect a finished probe of ``replica`` and start the next when it is due; the
        counts so far. ``probe`` None: a TCP check of ``port``."""
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
            state.running = self._pool.submit(_attempt, used, address, port, run_exec)
        return state

    def forget(self, replica: str, kinds: Sequence[str] = KINDS) -> None:
        for kind in kinds:
            self._states.pop((replica, kind), None)

    def known(self) -> set[str]:
        return {replica for replica, _ in self._states}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _attempt(probe: Probe, address: str, port: int, run_exec: ExecRunner | None) -> str | None:
    """One try of ``probe``: None when it passes, else why it failed."""
    if probe.http_get is not None:
        action = probe.http_get
        scheme = action.scheme.lower()
        url = f"{scheme}://{_host(address)}:{action.port or port}{action.path}"
        headers = [(h.name, h.value) for h in action.http_headers]
        return _http(url, headers, probe.timeout_seconds)
    if probe.tcp_socket is not None:
        return _tcp(address, probe.tcp_socket.port or port, probe.timeout_seconds)
    assert probe.exec_ is not None
    if run_exec is None:
        return "this backend cannot run exec probes"
    try:
        return run_exec(probe.exec_.command, probe.timeout_seconds)
    except Exception as err:  # a backend's failure is the probe's, never the controller's
        return f"exec probe failed: {type(err).__name__}: {err}"[:200]


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def _http(url: str, headers: list[tuple[str, str]], timeout: float) -> str | None:
    try:
        # A replica's certificate is not checked (Kubernetes' HTTPS probes do not either).
        answer = httpx.get(
            url, headers=headers, timeout=timeout, follow_redirects=False, verify=False
        )
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
