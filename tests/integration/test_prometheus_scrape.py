"""A real Prometheus (Debian's package) scrapes /metrics of a real server, with a metrics
reader's bearer token, and PromQL over the scraped series gives each tenant's GPU allocation,
its queues' guarantees and the cost rate of what runs."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.server_process import ServerProcess, free_port

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="Debian's prometheus is not installed (scripts/test.sh installs it)"
)
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
spec: {guaranteed: {gpu: 4}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: batch, tenant: globex}
---
apiVersion: aipaas/v1
kind: PriceList
metadata: {name: standard}
spec: {validFrom: 2020-01-01, gpu: [{model: "*", pricePerHour: 2}]}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: scraper}
spec: {role: metrics-reader}
"""


def job(name: str, tenant: str, queue: str, gpus: int) -> str:
    return (
        f"apiVersion: aipaas/v1\nkind: Job\n"
        f"metadata: {{name: {name}, tenant: {tenant}, annotations: {{{SIM}}}}}\n"
        f"spec: {{queue: {queue}, tasks: [{{name: w, command: [x], "
        f"resources: {{gpu: {gpus}}}}}]}}\n"
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("server"),
        backend="sim",
        env={"AIPAAS_BUDGET_INTERVAL_SECONDS": "0.5"},
    ).start()
    try:
        yield process
    finally:
        process.stop()


def scraper_token(server: ServerProcess) -> str:
    with server.http() as client:
        made = client.post("/tokens", json={"user": "scraper"})
        assert made.status_code == 201, made.text
        return str(made.json()["token"])


@pytest.fixture(scope="module")
def prometheus(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with server.http() as client:
        answer = client.post("/apply", content=SETUP)
        assert answer.status_code == 200, answer.text
        for text in (
            job("train", "acme", "research", 3),
            job("eval", "acme", "research", 1),
            job("etl", "globex", "batch", 2),
        ):
            answer = client.post("/apply", content=text)
            assert answer.status_code == 200, answer.text
    folder = tmp_path_factory.mktemp("prometheus")
    token = folder / "token"
    token.write_text(scraper_token(server))
    config = folder / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: aipaas\n"
        f"    authorization: {{credentials_file: {token}}}\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{server.port}']}}]\n"
    )
    port = free_port()
    assert PROMETHEUS is not None
    log = (folder / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.close()


def query(url: str, promql: str) -> dict[tuple[str, ...], float]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=30).json()
    assert answer["status"] == "success", answer
    return {
        tuple(v for _, v in sorted(item["metric"].items())): float(item["value"][1])
        for item in answer["data"]["result"]
    }


def check_eventually(url: str, promql: str, want: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    seen: Any = None
    while time.monotonic() < deadline:
        try:
            seen = query(url, promql)
        except httpx.TransportError:
            seen = "prometheus not up yet"
        if seen == want:
            return
        time.sleep(0.5)
    raise AssertionError(f"{promql}: {seen!r}, wanted {want!r}")


def test_prometheus_sees_each_tenants_gpu_allocation(prometheus: str) -> None:
    check_eventually(
        prometheus,
        "sum by (tenant) (aipaas_tenant_gpus_allocated)",
        {("acme",): 4.0, ("globex",): 2.0},
    )
    check_eventually(
        prometheus,
        "sum by (tenant, queue) (aipaas_queue_gpus_allocated)",
        {("batch", "globex"): 2.0, ("research", "acme"): 4.0},
    )
    check_eventually(
        prometheus,
        'sum by (queue) (aipaas_queue_gpus_guaranteed{tenant="acme"})',
        {("research",): 4.0},
    )


def test_prometheus_sees_the_cost_rate_and_the_scheduling_latency(prometheus: str) -> None:
    check_eventually(
        prometheus,
        "sum by (tenant) (aipaas_tenant_cost_per_hour)",
        {("acme",): 8.0, ("globex",): 4.0},
    )
    check_eventually(
        prometheus,
        "sum by (tenant) (aipaas_queue_scheduling_latency_seconds_count)",
        {("acme",): 2.0, ("globex",): 1.0},
    )
