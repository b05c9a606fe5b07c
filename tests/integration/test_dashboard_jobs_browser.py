"""The dashboard's job list in a real headless Chromium against a real `aipaas up` (the demo
cluster, whose node offers fake GPUs on a machine without any): a GPU job's GPUs as a number
(not NaN), a submission template that names a queue the user has (submitted as it is, it
runs), the reason column, and Cancel and Rerun buttons that do what `aipaas cancel` and
`aipaas rerun` do. Every page request must stay on the server.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, Route, expect

from tests.integration.dashboard_browser import Browser, browser_or_skip, screenshot_dir
from tests.integration.up_process import UpProcess

ROOT = Path(__file__).resolve().parents[2]
WAIT_MS = 60_000  # every wait is a polled condition: a long deadline costs nothing when fast
expect.set_options(timeout=WAIT_MS)

JOBS = """apiVersion: aipaas/v1
kind: Job
metadata: {name: gpu-job, tenant: acme}
spec:
  queue: research
  tasks:
    - name: main
      command: [sh, -c, 'echo "gpus $CUDA_VISIBLE_DEVICES"']
      resources: {cpu: 1, memory: 64Mi, gpu: 1}
---
apiVersion: aipaas/v1
kind: Job
metadata: {name: long, tenant: acme}
spec:
  queue: research
  tasks:
    - name: main
      command: [sh, -c, 'sleep 600']
      resources: {cpu: 1, memory: 64Mi}
---
apiVersion: aipaas/v1
kind: Job
metadata: {name: too-big, tenant: acme}
spec:
  queue: research
  tasks:
    - name: main
      command: [sh, -c, 'true']
      resources: {cpu: 1000, memory: 64Mi}
"""


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    process = UpProcess(tmp_path_factory.mktemp("dashboard-up")).start()
    try:
        for manifest in (str(ROOT / "examples" / "hello.yaml"), "-"):
            done = process.cli("apply", "-f", manifest, input=JOBS)
            assert done.returncode == 0, done.stderr
        yield process
    finally:
        process.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with browser_or_skip() as found:
        yield found


@pytest.fixture
def page(browser: Browser, up: UpProcess) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(WAIT_MS)
    offsite: list[str] = []

    def only_this_server(route: Route) -> None:
        if route.request.url.startswith(up.url + "/"):
            route.continue_()
        else:
            offsite.append(route.request.url)
            route.abort()

    context.route("**/*", only_this_server)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.goto(up.url + "/")
    opened.fill("#token", up.token)
    opened.click("#login-form button")
    expect(opened.locator("#login")).to_be_hidden()
    opened.click("nav a[data-page=jobs]")
    yield opened
    context.close()
    assert not errors, f"the page's scripts failed: {errors}"
    assert not offsite, f"the page reached outside the server: {offsite}"


def job_row(page: Page, job: str) -> Locator:
    """The list's row of ``job`` (its link's text exactly: gpu-job is not gpu-job-2)."""
    link = page.locator("a.job-link", has_text=re.compile(f"^{re.escape(job)}$"))
    return page.locator("#jobs tbody tr", has=link)


def column(page: Page, header: str) -> int:
    headers = [t.strip() for t in page.locator("#jobs thead th").all_inner_texts()]
    return headers.index(header)


def test_a_gpu_job_shows_its_gpus_as_a_number_and_every_job_its_reason(
    page: Page, up: UpProcess
) -> None:
    jobs = page.locator("#jobs")
    expect(jobs).to_contain_text("gpu-job")
    gpus = column(page, "GPUs")
    two = job_row(page, "gpu-job")
    expect(two.locator("td").nth(gpus)).to_have_text("1")
    expect(jobs).not_to_contain_text("NaN")
    reason = column(page, "reason")
    big = job_row(page, "too-big")
    expect(big.locator("td").nth(reason)).to_have_text("QuotaExceeded")
    expect(two.locator("td").nth(reason)).to_have_text("Succeeded")
    page.screenshot(path=str(screenshot_dir() / "jobs-reasons.png"), full_page=True)


def test_the_submit_template_names_a_queue_that_exists_and_runs_as_it_is(
    page: Page, up: UpProcess
) -> None:
    editor = page.locator("#submit-text")
    expect(editor).to_have_value(re.compile(r"tenant: acme\}\nspec:\n  queue: research\n"))
    page.click("#submit")
    expect(page.locator("#job-phase")).to_have_text("Succeeded")


def test_cancel_stops_a_running_job_and_rerun_submits_a_finished_one_again(
    page: Page, up: UpProcess
) -> None:
    long = job_row(page, "long")
    expect(long.locator("button.job-cancel")).to_be_visible()
    long.locator("button.job-cancel").click()
    expect(page.locator("#job-action-result")).to_contain_text("cancelling job long")
    expect(long).to_contain_text("Cancelled")
    two = job_row(page, "gpu-job")
    two.locator("button.job-rerun").click()
    expect(page.locator("#job-action-result")).to_contain_text(
        "created: job gpu-job-2 (rerun of gpu-job)"
    )
    rerun = job_row(page, "gpu-job-2")
    expect(rerun).to_contain_text("Succeeded")
    made = up.cli("get", "job/gpu-job-2", "-t", "acme", "-o", "yaml").stdout
    assert "aipaas.io/rerun-of: gpu-job" in made
