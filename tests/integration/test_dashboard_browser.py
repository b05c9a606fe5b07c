"""The web dashboard in a real headless Chromium (Debian's, driven by Playwright; no browser
download) against a real server: sign-in, the cluster, a job followed from submission to
success with its logs, a usage chart that moves, tenants that never see each other, and the
OpenAPI page offline. Every page request must stay on the server (anything else is aborted and
fails the test). Screenshots go to test-output/screenshots/ (an artefact of the run).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from tests.integration.dashboard_browser import Browser, browser_or_skip, screenshot_dir
from tests.support.server_process import ADMIN, SETUP, ServerProcess, shared_dir

# Playwright's default waits (5 s for an expectation, 30 s for an action) are too short for a
# loaded 2-core machine running Chromium beside the server: every wait here is a polled
# condition, so a long deadline costs nothing when things are fast.
WAIT_MS = 60_000
expect.set_options(timeout=WAIT_MS)

TENANTS = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: alice, tenant: acme}
spec: {role: member}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: globex}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: lab, tenant: globex}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: bob, tenant: globex}
spec: {role: member}
"""
# One unit per CPU core-second: a few seconds of a job move the cost chart.
PRICES = """apiVersion: aipaas/v1
kind: PriceList
metadata: {name: standard}
spec: {currency: EUR, validFrom: "2026-01-01", cpuCoreHour: 3600}
---
apiVersion: aipaas/v1
kind: Budget
metadata: {name: acme-monthly, tenant: acme}
spec: {amount: 5000, currency: EUR, period: monthly, thresholds: [50, 80, 100]}
"""


def job_yaml(name: str, queue: str, script: str) -> str:
    return f"""apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}}}
spec:
  queue: {queue}
  tasks:
    - name: main
      command: [/bin/sh, -c, {script!r}]
      resources: {{cpu: 2, memory: 64Mi}}
"""


@dataclass
class World:
    server: ServerProcess
    tokens: dict[str, str]
    offsite: list[str] = field(default_factory=list)  # requests that left the server


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    server = ServerProcess(tmp_path_factory.mktemp("dashboard") / "data").start()
    try:
        tokens = {}
        with server.http() as client:
            client.post("/apply", content=TENANTS).raise_for_status()
            client.post("/apply", content=PRICES).raise_for_status()
            for user, tenant in (("alice", "acme"), ("bob", "globex")):
                answer = client.post("/tokens", json={"user": user, "tenant": tenant})
                answer.raise_for_status()
                tokens[user] = answer.json()["token"]
        yield World(server, tokens)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with browser_or_skip() as found:
        yield found


@pytest.fixture
def page(browser: Browser, world: World) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    host = world.server.url

    def only_this_server(route: Route) -> None:
        if route.request.url.startswith(host + "/"):
            route.continue_()
        else:
            world.offsite.append(route.request.url)
            route.abort()

    context.route("**/*", only_this_server)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, f"the page's scripts failed: {errors}"
    assert not world.offsite, f"the page reached outside the server: {world.offsite}"


def sign_in(page: Page, world: World, user: str, token: str | None = None) -> None:
    page.goto(world.server.url + "/")
    page.fill("#token", token or world.tokens[user])
    page.click("#login-form button")
    expect(page.locator("#whoami")).to_contain_text(user)
    expect(page.locator("#login")).to_be_hidden()


def shoot(page: Page, name: str) -> None:
    """Save the page as an artefact of the run (and check that it was written)."""
    path = screenshot_dir() / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sign_in_refuses_a_bad_token_then_shows_the_cluster(page: Page, world: World) -> None:
    page.goto(world.server.url + "/")
    expect(page.locator("#login-form")).to_be_visible()
    page.fill("#token", "not-a-token")
    page.click("#login-form button")
    expect(page.locator("#login-error")).to_contain_text("not valid")
    expect(page.locator("#nav")).to_be_hidden()
    sign_in(page, world, "alice")
    expect(page.locator("#whoami")).to_contain_text("acme")
    # The cluster: this machine's node, its CPU cores, and the allocation chart.
    nodes = page.locator("#nodes tbody tr")
    expect(nodes).to_have_count(1)
    expect(nodes.first).to_contain_text("local")
    expect(page.locator("#stat-cpus")).to_contain_text("/ 8")
    expect(page.locator("#page-cluster figure.chart svg")).to_be_visible()
    # The token is this tab's only: kept in sessionStorage, and gone on sign-out.
    kept = page.evaluate("sessionStorage.getItem('aipaas.token')")
    assert kept == world.tokens["alice"]
    shoot(page, "cluster")
    page.click("#logout")
    expect(page.locator("#login-form")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('aipaas.token')") is None


def test_a_revoked_token_ends_the_session(page: Page, world: World) -> None:
    with world.server.http() as client:
        answer = client.post("/tokens", json={"user": "alice", "tenant": "acme", "name": "tab"})
        answer.raise_for_status()
        created = answer.json()
    sign_in(page, world, "alice", created["token"])
    with world.server.http() as client:
        client.delete(f"/tokens/{created['id']}").raise_for_status()
    # The next read (here: opening another page) is refused (401): the tab forgets the token
    # and asks for another.
    page.click("nav a[data-page=queues]")
    expect(page.locator("#login-error")).to_contain_text("session ended", timeout=60_000)
    expect(page.locator("#nav")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('aipaas.token')") is None


def test_the_series_routes_need_a_token(world: World) -> None:
    with httpx.Client(base_url=world.server.url + "/api/v1") as client:
        for series in ("timeline", "cost", "events"):
            assert client.get(f"/dashboard/{series}").status_code == 401, series
            bad = {"Authorization": "Bearer not-a-token"}
            assert client.get(f"/dashboard/{series}", headers=bad).status_code == 401, series


def test_a_job_is_followed_from_submission_to_success_with_its_logs(
    page: Page, world: World
) -> None:
    sign_in(page, world, "alice")
    page.click("nav a[data-page=jobs]")
    # A line of markup in the logs stays text: the page never turns API text into elements.
    # The job holds until the test has seen it running without its last line (a release file,
    # waited for at most 5 minutes), however slowly the page and the job move.
    release = shared_dir() / "release"
    hold = f"i=0; while [ ! -e {release} ] && [ $i -lt 3000 ]; do sleep 0.1; i=$((i+1)); done"
    script = f"echo first line; echo '<img id=injected src=/x>'; {hold}; echo last line"
    page.fill("#submit-text", job_yaml("hello", "research", script))
    page.click("#submit")
    expect(page).to_have_url(re.compile(r"/dashboard/jobs\?name=hello"))
    # The first line shows while the job still runs: the logs follow, they are not read once.
    logs = page.locator("#logs")
    expect(logs).to_contain_text("first line", timeout=60_000)
    expect(page.locator("#job-phase")).to_have_text("Running")
    expect(logs).not_to_contain_text("last line")
    shoot(page, "job-running")
    release.touch()
    expect(page.locator("#job-phase")).to_have_text("Succeeded", timeout=60_000)
    expect(logs).to_contain_text("last line")
    expect(logs).to_contain_text("<img id=injected src=/x>")
    expect(page.locator("#injected")).to_have_count(0)
    expect(page.locator("#tasks")).to_contain_text("main-0")
    expect(page.locator("#events")).not_to_contain_text("none")
    shoot(page, "job-succeeded")
    # The list shows it with its phase.
    page.click("text=← all jobs")
    expect(page.locator("#jobs")).to_contain_text("hello")
    expect(page.locator("#jobs")).to_contain_text("Succeeded")


def test_the_usage_and_cost_charts_move_while_a_job_runs(page: Page, world: World) -> None:
    sign_in(page, world, "alice")
    page.click("nav a[data-page=usage]")
    page.select_option("#resource", "cpu")
    page.select_option("#window", "300")
    usage, cost = page.locator("#usage-chart figure"), page.locator("#cost-chart figure")
    expect(cost).to_be_visible()
    before = chart_totals(page)
    with world.server.http(world.tokens["alice"]) as client:
        client.post("/apply", content=job_yaml("burn", "research", "sleep 4")).raise_for_status()
    deadline = time.monotonic() + 90
    after = before
    while time.monotonic() < deadline and not all(
        a > b for a, b in zip(after, before, strict=True)
    ):
        page.wait_for_timeout(500)
        after = chart_totals(page)
    assert after[0] > before[0], f"CPU-hours stayed at {before[0]}"
    assert after[1] > before[1], f"the cost stayed at {before[1]}"
    assert cost.get_attribute("data-series") == "1"
    assert usage.get_attribute("data-series") == "1"
    expect(page.locator("#cost-chart")).to_contain_text("EUR")
    expect(page.locator("#prices")).to_contain_text("standard")
    expect(page.locator("#usage")).to_contain_text("research")
    shoot(page, "usage")
    world.server.wait_phase("burn", "Succeeded", timeout=90)
    # CPU is the only thing priced: 3600 EUR a core-hour, so the cost is 3600 x the CPU-hours
    # (of every job in the window), and what the API's cost route says. Polled: the charts
    # show the whole job once the page has refreshed after its end (a loaded machine may take
    # several refresh periods to get there).
    deadline = time.monotonic() + 60
    while True:
        cpu_hours, spent = chart_totals(page)
        with world.server.http(world.tokens["alice"]) as client:
            priced = client.get("/cost", params={"since": "300s"}).json()["total"]["EUR"]
        settled = spent == pytest.approx(3600 * cpu_hours, rel=0.02)
        if (settled and priced == pytest.approx(spent, rel=0.1)) or time.monotonic() > deadline:
            break
        page.wait_for_timeout(500)
    assert spent == pytest.approx(3600 * cpu_hours, rel=0.02)
    assert priced == pytest.approx(spent, rel=0.1)


def chart_totals(page: Page) -> tuple[float, float]:
    """What the usage and the cost charts show now (their right edges)."""
    usage = page.locator("#usage-chart figure").get_attribute("data-total")
    cost = page.locator("#cost-chart figure").get_attribute("data-total")
    return float(usage or "0"), float(cost or "0")


def test_budgets_and_alerts_show_the_tenants_own(page: Page, world: World) -> None:
    with world.server.http(world.tokens["alice"]) as client:
        client.post("/apply", content=job_yaml("oops", "research", "exit 3")).raise_for_status()
    world.server.wait_phase("oops", "Failed", timeout=90)
    sign_in(page, world, "alice")
    page.click("nav a[data-page=alerts]")
    budgets = page.locator("#budgets")
    expect(budgets).to_contain_text("acme-monthly")
    expect(budgets).to_contain_text("5000 EUR monthly")
    expect(budgets.locator("svg.gauge")).to_have_count(1)
    expect(page.locator("#all-events")).to_contain_text("Created")
    # The failure is a warning, newest first.
    expect(page.locator("#warnings tbody tr").first).to_contain_text("Job acme/oops")
    shoot(page, "alerts")


def test_a_tenant_never_sees_another_tenants_data(page: Page, world: World) -> None:
    with world.server.http(world.tokens["alice"]) as client:
        client.post(
            "/apply", content=job_yaml("acme-secret", "research", "true")
        ).raise_for_status()
        # The series refuse another tenant's name as if it did not exist.
        for series in ("timeline", "cost", "events"):
            answer = client.get(f"/dashboard/{series}", params={"tenant": "globex"})
            assert answer.status_code == 404, series
    world.server.wait_phase("acme-secret", "Succeeded", timeout=90)
    sign_in(page, world, "bob")
    main = page.locator("main")
    for name, waits_for in (
        ("queues", "#queues"),
        ("jobs", "#jobs"),
        ("usage", "#usage"),
        ("alerts", "#all-events"),
        ("cluster", "#nodes"),
    ):
        page.click(f"nav a[data-page={name}]")
        expect(page.locator(waits_for)).to_be_visible()
        page.wait_for_timeout(300)  # a refresh or two: nothing of acme may come late either
        text = main.inner_text()
        for word in ("acme", "research", "hello", "burn", "alice"):
            assert word not in text, f"globex's {name} page shows {word!r}"
        shoot(page, f"globex-{name}")
    # Asking for acme's job by its address: the API answers 404, the page says it could not.
    page.goto(world.server.url + "/dashboard/jobs?name=acme-secret&tenant=acme")
    expect(page.locator("#status")).to_contain_text("could not update")
    assert "acme-secret" not in page.locator("#logs").inner_text()


def test_many_queues_chart_as_the_largest_and_one_other_layer(page: Page, world: World) -> None:
    page.goto(world.server.url + "/dashboard/")
    shaped = page.evaluate(
        """async () => {
            const { topSeries } = await import("/dashboard/assets/js/timeline.js");
            const series = [...Array(10).keys()].map(
                (i) => ({ name: `q${i}`, values: [i, 2 * i] }));
            return topSeries(series);
        }"""
    )
    assert [s["name"] for s in shaped] == [*(f"q{i}" for i in range(9, 2, -1)), "other (3 queues)"]
    assert shaped[-1]["values"] == [0 + 1 + 2, 0 + 2 + 4]


def test_the_openapi_page_works_offline(page: Page, world: World) -> None:
    page.goto(world.server.url + "/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("aipaas", timeout=60_000)
    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    timeline = page.locator(".opblock-summary-path[data-path='/api/v1/dashboard/timeline']")
    expect(timeline).to_be_visible()
    shoot(page, "openapi")


def test_assets_come_from_the_package_and_nothing_else_is_served(world: World) -> None:
    with httpx.Client(base_url=world.server.url) as client:
        for path in ("/", "/dashboard", "/dashboard/", "/dashboard/queues"):
            answer = client.get(path)
            assert answer.status_code == 200, path
            assert answer.headers["content-type"].startswith("text/html")
            assert 'id="login-form"' in answer.text
        for path in ("/dashboard/assets/js/app.js", "/dashboard/assets/style.css"):
            answer = client.get(path)
            assert answer.status_code == 200
            assert "default-src 'self'" in answer.headers["content-security-policy"]
        for path in (
            "/dashboard/assets/../dashboard_routes.py",
            "/dashboard/assets/%2e%2e/%2e%2e/app.py",
            "/dashboard/assets/missing.js",
            "/dashboard/nowhere",
        ):
            assert client.get(path).status_code == 404, path


GPU_JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {name: train, tenant: acme, annotations: {sim.aipaas.dev/duration: "300s"}}
spec:
  queue: research
  tasks:
    - name: w
      replicas: 2
      command: [train]
      resources: {gpu: 4, cpu: 8, memory: 1Gi}
"""


@pytest.fixture(scope="module")
def gpu_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """A server on the simulated backend: two nodes of eight H100s each. Its job runs for
    longer than the test looks (the page must see it running, however slow the machine)."""
    server = ServerProcess(tmp_path_factory.mktemp("dashboard-sim") / "data", backend="sim")
    server.start()
    try:
        with server.http() as client:
            client.post("/apply", content=SETUP).raise_for_status()
        yield World(server, {"admin": ADMIN})
    finally:
        server.stop()


def test_gpus_by_model_allocation_over_time_and_queue_shares(
    browser: Browser, gpu_world: World
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    try:
        sign_in(page, gpu_world, "admin")
        expect(page.locator("#whoami")).to_contain_text("all tenants")
        expect(page.locator("#gpu-models")).to_contain_text("H100")
        expect(page.locator("#stat-gpus")).to_contain_text("0 / 16")
        chart = page.locator("#page-cluster figure.chart")
        page.select_option("#window", "300")
        with gpu_world.server.http() as client:
            client.post("/apply", content=GPU_JOB).raise_for_status()
        # 8 of the 16 GPUs: the cards say so, and the chart rises under its capacity line.
        expect(page.locator("#stat-gpus")).to_contain_text("8 / 16", timeout=60_000)
        page.wait_for_function(
            "() => Number(document.querySelector('#page-cluster figure.chart').dataset.total) > 0",
            timeout=60_000,
        )
        expect(chart).to_contain_text("capacity 16")
        shoot(page, "cluster-gpus")
        page.click("nav a[data-page=queues]")
        queues = page.locator("#queues")
        expect(queues).to_contain_text("acme/research")
        expect(queues.locator("tbody tr").first).to_contain_text("8")
        expect(page.locator("figure.shares rect").first).to_be_visible()
        shoot(page, "queues")
    finally:
        context.close()
