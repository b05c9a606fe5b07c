"""Budgets on a real server: a real HTTP receiver gets each threshold crossing once, signed,
after answering 500 to the first try; at 100% the queue's admission stops (a new job waits
with the reason), and a tenant never sees another's budgets or deliveries."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from aipaas.metering.webhooks import DELIVERY_HEADER, verify
from tests.integration.webhook_receiver import Receiver
from tests.support.server_process import ServerProcess

SIM = 'sim.aipaas.dev/duration: "3600"'
KEY = "receiver-key"
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
kind: User
metadata: {name: bob, tenant: globex}
spec: {role: tenant-admin}
---
apiVersion: aipaas/v1
kind: PriceList
metadata: {name: steep}
spec: {validFrom: 2020-01-01, gpu: [{model: "*", pricePerHour: 3600}]}
---
apiVersion: aipaas/v1
kind: Secret
metadata: {name: hooks, tenant: acme}
spec: {data: {signing: KEY}}
---
apiVersion: aipaas/v1
kind: Budget
metadata: {name: research, tenant: acme}
spec:
  queue: research
  amount: 12
  period: daily
  thresholds: [50, {percent: 100, action: stopAdmission}]
  webhook: {url: URL, secretRef: {name: hooks, key: signing}}
"""


def job(name: str, gpus: int) -> str:
    return (
        f"apiVersion: aipaas/v1\nkind: Job\n"
        f"metadata: {{name: {name}, tenant: acme, annotations: {{{SIM}}}}}\n"
        f"spec: {{queue: research, tasks: [{{name: w, command: [x], "
        f"resources: {{gpu: {gpus}}}}}]}}\n"
    )


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    made = Receiver(failures=1)
    yield made
    made.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("server"),
        backend="sim",
        env={"AIPAAS_BUDGET_INTERVAL_SECONDS": "0.5", "AIPAAS_WEBHOOK_ALLOW_PRIVATE": "true"},
    ).start()
    try:
        with process.http() as client:
            setup = SETUP.replace("KEY", KEY).replace("URL", receiver.url)
            answer = client.post("/apply", content=setup)
            assert answer.status_code == 200, answer.text
            # 2 GPUs at 3600 an hour: 2 a second; 50% of 12 in about 3 s, 100% in about 6 s.
            assert client.post("/apply", content=job("burn", 2)).status_code == 200
        yield process
    finally:
        process.stop()


def crossings(receiver: Receiver) -> list[float]:
    return sorted(json.loads(body)["threshold"] for _, body in receiver.accepted)


def wait_for(check: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.25)
    raise AssertionError("timed out")


def test_each_crossing_reaches_the_receiver_once_signed(
    server: ServerProcess, receiver: Receiver
) -> None:
    wait_for(lambda: crossings(receiver) == [50, 100])
    time.sleep(3)  # several more evaluations and delivery rounds: nothing is sent again
    assert crossings(receiver) == [50, 100]
    assert receiver.refused == 1
    assert all(verify(KEY.encode(), headers, body) for headers, body in receiver.accepted)
    assert len({headers[DELIVERY_HEADER] for headers, _ in receiver.accepted}) == 2
    with server.http() as client:
        budget = client.get("/budgets/research", params={"tenant": "acme"}).json()
    assert budget["status"]["crossed"] == [50, 100]
    assert budget["status"]["spent"] >= 12


def test_a_stopped_queue_admits_no_new_job(server: ServerProcess, receiver: Receiver) -> None:
    wait_for(lambda: 100 in crossings(receiver))
    with server.http() as client:
        queue = client.get("/queues/research", params={"tenant": "acme"}).json()
        assert queue["metadata"]["annotations"]["aipaas.dev/admission-stopped"] == "research"
        assert client.post("/apply", content=job("late", 1)).status_code == 200
    wait_for(lambda: (server.job("late").get("status") or {}).get("reason") == "AdmissionStopped")
    time.sleep(1)
    assert server.phase("late") == "Pending"
    assert server.phase("burn") == "Running"  # what runs goes on


def test_another_tenant_sees_no_budget_and_no_delivery(server: ServerProcess) -> None:
    with server.http() as admin:
        token = admin.post("/tokens", json={"user": "bob", "tenant": "globex"}).json()["token"]
    with server.http(token) as bob:
        for path in ("/budgets/research", "/webhookdeliveries", "/secrets/hooks"):
            answer = bob.get(path, params={"tenant": "acme"})
            assert answer.status_code == 404, (path, answer.text)
        assert bob.get("/budgets").json()["items"] == []
        assert bob.get("/webhookdeliveries").json()["items"] == []
        budget = SETUP.split("---")[-1].replace("URL", "http://127.0.0.1:9/").replace("KEY", "x")
        assert bob.post("/apply", content=budget).status_code == 404  # acme's: not there
