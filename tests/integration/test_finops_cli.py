"""The FinOps commands against a real server: usage and cost by any dimension in table, JSON
and CSV; a statement; prices; invite and redeem; budgets in `get`; errors with their exit codes."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterator

import pytest

from tests.support.server_process import ServerProcess

SIM = 'sim.aipaas.dev/duration: "2"'
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
metadata: {name: tad, tenant: acme}
spec: {role: tenant-admin}
---
apiVersion: aipaas/v1
kind: PriceList
metadata: {name: standard}
spec: {validFrom: 2020-01-01, gpu: [{model: "*", pricePerHour: 3600}], cpuCoreHour: 0}
---
apiVersion: aipaas/v1
kind: Budget
metadata: {name: monthly, tenant: acme}
spec: {amount: 1000, thresholds: [50, 100]}
"""
JOB = (
    "apiVersion: aipaas/v1\nkind: Job\n"
    f"metadata: {{name: NAME, tenant: acme, annotations: {{{SIM}}}}}\n"
    "spec: {queue: research, tasks: [{name: w, command: [x], resources: {gpu: 1}}]}\n"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("server"),
        backend="sim",
        env={"AIPAAS_BUDGET_INTERVAL_SECONDS": "0.5"},
    ).start()
    try:
        process.cli("apply", "-f", "-", input=SETUP)
        for name in ("one", "two"):
            process.cli("apply", "-f", "-", input=JOB.replace("NAME", name))
        for name in ("one", "two"):
            process.wait_phase(name, "Succeeded", timeout=120)
        yield process
    finally:
        process.stop()


def test_usage_by_job_in_json_csv_and_table(server: ServerProcess) -> None:
    answer = json.loads(server.cli("usage", "--by", "job", "-o", "json").stdout)
    cost = {row["job"]: row["cost"] for row in answer["items"]}
    assert sorted(cost) == ["one", "two"]
    for job in ("one", "two"):  # 1 GPU for 2 s (more when the machine is slow) at 1 a second
        assert 1.5 <= cost[job] <= 30, cost
    rows = list(csv.DictReader(io.StringIO(server.cli("usage", "--by", "job", "-o", "csv").stdout)))
    assert [r["job"] for r in rows] == ["one", "two"]
    assert [float(r["cost"]) for r in rows] == [cost["one"], cost["two"]]
    table = server.cli("usage", "--by", "tenant,queue").stdout
    assert "TOTAL" in table and "research" in table and "USD" in table


def test_a_statement_and_the_price_view(server: ServerProcess) -> None:
    text = server.cli("statement", "acme", "-o", "csv").stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows[-1]["queue"] == "TOTAL" and float(rows[-1]["cost"]) > 3
    prices = server.cli("prices", "-t", "acme").stdout
    assert "standard" in prices and "yes" in prices


def test_budgets_show_their_spend_in_get(server: ServerProcess) -> None:
    deadline = time.monotonic() + 90
    with server.http() as client:
        while time.monotonic() < deadline:
            budget = client.get("/budgets/monthly", params={"tenant": "acme"}).json()
            if (budget.get("status") or {}).get("spent", 0) > 3:
                break
            time.sleep(0.5)
    assert (budget.get("status") or {}).get("spent", 0) > 3, budget
    table = server.cli("get", "budgets", "-t", "acme").stdout
    assert "SPENT" in table and "monthly" in table and "1000 USD" in table


def test_invite_and_redeem(server: ServerProcess) -> None:
    with server.http() as client:
        tad = client.post("/tokens", json={"user": "tad", "tenant": "acme"}).json()["token"]
    made = server.cli("invite", "nina", "--role", "viewer", token=tad).stdout
    token = next(line.split()[-1] for line in made.splitlines() if line.startswith("token:"))
    done = server.cli("redeem", token, token="").stdout
    assert "user nina (viewer) created in tenant acme" in done
    nina = next(line.split()[-1] for line in done.splitlines() if line.startswith("token:"))
    queues = json.loads(server.cli("get", "queues", "-o", "json", token=nina).stdout)
    names = [
        q["metadata"]["name"] for q in (queues if isinstance(queues, list) else queues["items"])
    ]
    assert names == ["research"]  # nina acts in acme with her new token
    again = server.cli("redeem", token, token="", check=False)
    assert again.returncode == 3 and "no such invitation" in again.stderr


def test_errors_have_their_exit_codes(server: ServerProcess) -> None:
    bad = server.cli("usage", "--by", "colour", check=False)
    assert bad.returncode == 2 and "colour" in bad.stderr
    assert server.cli("usage", "-o", "xml", check=False).returncode == 2
    with server.http() as client:
        tad = client.post("/tokens", json={"user": "tad", "tenant": "acme"}).json()["token"]
    other = server.cli("statement", "globex", token=tad, check=False)
    assert other.returncode == 3 and "not found" in other.stderr
