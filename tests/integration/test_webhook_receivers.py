"""Tenants' webhook receivers against a real server: a receiver that answers one byte every
2.5 s (each read within the per-read timeout, the whole answer never) does not hold the
controller, so another tenant's job is still scheduled within a bound and the delivery fails
with its total deadline; and a webhook refused as internal does not tell the tenant what the
platform's host names resolve to."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server_process import ServerProcess

SIM = 'sim.aipaas.dev/duration: "3600"'
SETUP = """
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: globex}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: lab, tenant: globex}
---
apiVersion: aipaas/v1
kind: PriceList
metadata: {name: steep}
spec: {validFrom: 2020-01-01, gpu: [{model: "*", pricePerHour: 3600}]}
---
apiVersion: aipaas/v1
kind: Secret
metadata: {name: hooks, tenant: acme}
spec: {data: {signing: receiver-key}}
---
apiVersion: aipaas/v1
kind: Budget
metadata: {name: research, tenant: acme}
spec:
  queue: research
  amount: 1
  period: daily
  thresholds: [50]
  webhook: {url: URL, secretRef: {name: hooks, key: signing}}
"""
#: how long after the other tenant's job is applied it must be running (a few cycles)
SCHEDULING_BOUND_SECONDS = 10.0
#: how long the slow receiver keeps answering one byte at a time (far past the bound)
DRIP_SECONDS = 90.0


def job(name: str, tenant: str, queue: str) -> str:
    return (
        f"apiVersion: aipaas/v1\nkind: Job\n"
        f"metadata: {{name: {name}, tenant: {tenant}, annotations: {{{SIM}}}}}\n"
        f"spec: {{queue: {queue}, tasks: [{{name: w, command: [x], "
        f"resources: {{gpu: 1}}}}]}}\n"
    )


class SlowDripReceiver:
    """A loopback TCP server that reads a request, then answers ``HTTP/1.1 200 OK...`` one
    byte every ``every`` seconds for ``seconds`` seconds: every read of the sender is within
    a 3 s read timeout, and the answer never ends."""

    def __init__(self, every: float = 2.5, seconds: float = DRIP_SECONDS) -> None:
        self.every = every
        self.seconds = seconds
        self.connections: list[float] = []  # when each connection was accepted
        self.closed = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(time.monotonic())
            threading.Thread(target=self._drip, args=(connection,), daemon=True).start()

    def _drip(self, connection: socket.socket) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" * 1000
        with connection:
            connection.settimeout(5)
            try:
                connection.recv(65536)  # the request (its bytes are not checked here)
                end = time.monotonic() + self.seconds
                for index in range(len(answer)):
                    if time.monotonic() > end or self.closed.wait(self.every):
                        return
                    connection.sendall(answer[index : index + 1])
            except OSError:
                return

    def close(self) -> None:
        self.closed.set()
        self.listener.close()


@pytest.fixture(scope="module")
def drip() -> Iterator[SlowDripReceiver]:
    made = SlowDripReceiver()
    yield made
    made.close()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, drip: SlowDripReceiver
) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("slow-receiver"),
        backend="sim",
        env={"AIPAAS_BUDGET_INTERVAL_SECONDS": "0.5", "AIPAAS_WEBHOOK_ALLOW_PRIVATE": "true"},
    ).start()
    try:
        with process.http() as client:
            answer = client.post("/apply", content=SETUP.replace("URL", drip.url))
            assert answer.status_code == 200, answer.text
        yield process
    finally:
        process.close()


def footprint(server: ServerProcess) -> dict[str, int]:
    """The server process's resident memory (KiB), threads and open file descriptors."""
    assert server.process is not None
    proc = Path(f"/proc/{server.process.pid}")
    status = (proc / "status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status if ":" in line)
    return {
        "rss_kib": int(fields["VmRSS"].split()[0]),
        "threads": int(fields["Threads"]),
        "fds": len(list((proc / "fd").iterdir())),
    }


def wait_for(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_slow_drip_receiver_does_not_hold_another_tenants_scheduling(
    server: ServerProcess, drip: SlowDripReceiver
) -> None:
    before = footprint(server)
    with server.http() as client:
        # 1 GPU at 3600 an hour spends the budget's 50% (0.5) in about half a second.
        assert client.post("/apply", content=job("burn", "acme", "research")).status_code == 200
        wait_for(lambda: drip.connections, 60, "the budget's webhook to reach the receiver")
        time.sleep(1)  # the delivery is now in its receiver's slow answer
        applied = time.monotonic()
        answer = client.post("/apply", content=job("other", "globex", "lab"))
        assert answer.status_code == 200, answer.text
        deadline = applied + DRIP_SECONDS
        while server.phase("other", "globex") != "Running" and time.monotonic() < deadline:
            time.sleep(0.1)
        latency = time.monotonic() - applied
        during = footprint(server)
        print(f"other tenant's job running {latency:.2f} s after it was applied")
        print(f"server before the slow receiver: {before}; while it drips: {during}")
        assert during["threads"] <= before["threads"] + 4  # one send under way, no pile-up
        assert latency < SCHEDULING_BOUND_SECONDS, f"{latency:.1f} s: the loop was held"
        assert httpx.get(server.url + "/readyz", timeout=10).status_code == 200

        # The delivery gives up at its total deadline (not when the receiver stops) and says so.
        def failed_once() -> bool:
            items = client.get("/webhookdeliveries", params={"tenant": "acme"}).json()["items"]
            return any((d.get("status") or {}).get("lastError") for d in items)

        wait_for(failed_once, 30, "the delivery's first attempt to end")
        items = client.get("/webhookdeliveries", params={"tenant": "acme"}).json()["items"]
        status = items[0]["status"]
        assert status["phase"] == "Pending" and status["attempts"] >= 1
        assert "deadline" in status["lastError"], status
        assert time.monotonic() - drip.connections[0] < DRIP_SECONDS


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Tenants' webhooks go to public addresses only (the default)."""
    process = ServerProcess(
        tmp_path_factory.mktemp("strict-webhooks"),
        backend="sim",
        env={"AIPAAS_BUDGET_INTERVAL_SECONDS": "0.5"},
    ).start()
    try:
        with process.http() as client:
            setup = SETUP.replace("URL", "http://localhost:9/hook")
            answer = client.post("/apply", content=setup)
            assert answer.status_code == 200, answer.text
            assert client.post("/apply", content=job("burn", "acme", "research")).status_code == 200
        yield process
    finally:
        process.close()


def test_a_refused_webhook_does_not_say_what_an_internal_name_resolves_to(
    strict_server: ServerProcess,
) -> None:
    resolved = {str(info[4][0]) for info in socket.getaddrinfo("localhost", 9)}
    assert resolved, "localhost resolves here"
    with strict_server.http() as client:

        def refused() -> str:
            items = client.get("/webhookdeliveries", params={"tenant": "acme"}).json()["items"]
            errors = [(d.get("status") or {}).get("lastError") or "" for d in items]
            return next((e for e in errors if e), "")

        wait_for(refused, 60, "the delivery to be refused")
        error = refused()
        assert error.startswith("refused:") and "localhost" in error, error
        assert "not a public address" in error or "public" in error, error
        events = client.get("/events", params={"tenant": "acme"}).text
        shown = error + events
        for address in resolved | {"127.0.0.1", "::1"}:
            assert address not in shown, f"{address} shown: {error}"
