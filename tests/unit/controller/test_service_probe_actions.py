"""The prober's three actions against real loopback listeners: an HTTP GET passes on 200-399
(its headers sent, its own port when given), a TCP connection passes when the port listens, an
exec probe passes on exit 0 through the backend's runner; the first try waits out
initialDelaySeconds; consecutive passes and failures are counted. And the local backend's exec
probe: the replica's environment and working directory, exit codes and timeouts reported."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from aipaas.api.service import ExecAction, HttpGetAction, HttpHeader, Probe, TcpSocketAction
from aipaas.backends.local.probe_exec import run_probe
from aipaas.backends.local.runner import LAUNCH_FILE
from aipaas.backends.probe_exec import NOT_HERE
from aipaas.controller.services_probe import READY, Prober, ProbeState


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = {"/ok": 200, "/moved": 302, "/loading": 503}.get(self.path, 404)
        if self.path == "/header":
            code = 200 if self.headers.get("X-Probe") == "yes" else 401
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def settle(prober: Prober, probe: Probe, port: int, tries: int = 1, **kw: object) -> ProbeState:
    """Run the probe ``tries`` times (each try collected before the next starts)."""
    state = ProbeState()
    for _ in range(tries):
        state = prober.check("r", READY, probe, "127.0.0.1", port, started_at=0.0, **kw)  # type: ignore[arg-type]
        deadline = time.monotonic() + 5
        while state.running is not None and not state.running.done():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        state = prober.check("r", READY, probe, "127.0.0.1", port, started_at=0.0, **kw)  # type: ignore[arg-type]
    return state


def fast(**action: object) -> Probe:
    return Probe.model_validate({**action, "periodSeconds": 0.01, "timeoutSeconds": 1})


@pytest.mark.parametrize(
    ("path", "passes"), [("/ok", True), ("/moved", True), ("/loading", False), ("/gone", False)]
)
def test_an_http_get_passes_on_200_to_399(port: int, path: str, passes: bool) -> None:
    prober = Prober()
    state = settle(prober, fast(httpGet={"path": path}), port)
    assert (state.passes, state.failures) == ((1, 0) if passes else (0, 1))
    if not passes:
        assert state.last_reason.startswith("HTTP ")


def test_an_http_get_sends_its_headers_and_uses_its_own_port(port: int) -> None:
    header = HttpGetAction(path="/header", http_headers=[HttpHeader(name="X-Probe", value="yes")])
    prober = Prober()
    assert settle(prober, Probe(http_get=header, period_seconds=0.01), port).passes == 1
    elsewhere = HttpGetAction(path="/ok", port=port)
    other = Prober()
    # The replica's own port (1) is closed: the probe's port is the one tried.
    assert settle(other, Probe(http_get=elsewhere, period_seconds=0.01), 1).passes == 1


def test_a_tcp_probe_passes_only_while_the_port_listens(port: int) -> None:
    assert settle(Prober(), fast(tcpSocket={}), port).passes == 1
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        free = closed.getsockname()[1]
    state = settle(Prober(), Probe(tcp_socket=TcpSocketAction(port=free)), port)
    assert state.failures == 1 and f"port {free}" in state.last_reason


def until(
    prober: Prober, probe: Probe, port: int, done: Callable[[ProbeState], bool]
) -> ProbeState:
    """Check again and again until ``done`` says so (5 s at most)."""
    deadline = time.monotonic() + 5
    while True:
        state = prober.check("r", READY, probe, "127.0.0.1", port, started_at=0.0)
        if done(state):
            return state
        assert time.monotonic() < deadline, state
        time.sleep(0.005)


def test_failures_and_passes_are_counted_in_a_row(port: int) -> None:
    prober = Prober()
    state = until(prober, fast(httpGet={"path": "/loading"}), port, lambda s: s.failures >= 3)
    assert state.passes == 0
    state = until(prober, fast(httpGet={"path": "/ok"}), port, lambda s: s.passes >= 2)
    assert state.failures == 0  # one pass ended the run of failures


def test_the_first_try_waits_out_the_initial_delay(port: int) -> None:
    prober = Prober()
    probe = Probe(tcp_socket=TcpSocketAction(), initial_delay_seconds=3600)
    state = prober.check("r", READY, probe, "127.0.0.1", port, started_at=time.time())
    assert state.running is None and state.passes == state.failures == 0


def test_an_exec_probe_goes_through_the_backends_runner(port: int) -> None:
    seen: list[tuple[Sequence[str], float]] = []

    def runner(command: Sequence[str], timeout: float) -> str | None:
        seen.append((command, timeout))
        return None if command[0] == "true" else "false exited with code 1"

    probe = Probe(exec_=ExecAction(command=["true"]), period_seconds=0.01, timeout_seconds=2)
    assert settle(Prober(), probe, port, run_exec=runner).passes == 1
    assert seen == [(["true"], 2.0)]
    failing = Probe(exec_=ExecAction(command=["false"]), period_seconds=0.01)
    state = settle(Prober(), failing, port, run_exec=runner)
    assert state.failures == 1 and "code 1" in state.last_reason
    without = settle(Prober(), probe, port)
    assert without.failures == 1 and "cannot run exec probes" in without.last_reason


def launch_dir(tmp_path: Path, env: dict[str, str]) -> Path:
    (tmp_path / "work").mkdir()
    launch = {"command": ["serve"], "env": env, "cwd": str(tmp_path / "work")}
    (tmp_path / LAUNCH_FILE).write_text(json.dumps(launch))
    return tmp_path


def test_the_local_exec_probe_runs_in_the_replicas_environment_and_directory(
    tmp_path: Path,
) -> None:
    directory = launch_dir(tmp_path, {"PATH": "/usr/bin:/bin", "PORT": "31234"})
    assert run_probe(directory, ["sh", "-c", 'test "$PORT" = 31234 && test -d ../work'], 5) is None
    failed = run_probe(directory, ["sh", "-c", "echo model not loaded; exit 3"], 5)
    assert failed == "sh exited with code 3: model not loaded"
    slow = run_probe(directory, ["sleep", "30"], 0.3)
    assert slow == "sleep did not exit within 0.3s"
    missing = run_probe(directory, ["no-such-command-here"], 5)
    assert missing is not None and "127" in missing


def test_the_local_exec_probe_of_an_unknown_replica_says_not_here(tmp_path: Path) -> None:
    assert run_probe(tmp_path, ["true"], 1) == NOT_HERE
