"""The CLI's conventions against a real server with its controller and real processes: get -w
sees a job go from Pending to Succeeded, wait, logs -f that waits for the start and says why
(the scheduler's own reason), rerun, cancel of several jobs, events -f."""

from __future__ import annotations

import subprocess

from tests.support.server_process import ADMIN, AIPAAS, TASK_PYTHON, ServerProcess

SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
"""


def job(name: str, code: str, *, gpus: int = 0) -> str:
    gpu = f", gpu: {gpus}" if gpus else ""
    return f"""apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, tenant: acme, labels: {{suite: cli}}}}
spec:
  queue: research
  tasks:
    - name: main
      command: [{TASK_PYTHON}, -c, {code!r}]
      resources: {{cpu: 1, memory: 64Mi{gpu}}}
"""


def watch(server: ServerProcess, *args: str) -> subprocess.Popen[str]:
    env = {"AIPAAS_URL": server.url, "AIPAAS_TOKEN": ADMIN, "PATH": "/usr/bin:/bin"}
    env["AIPAAS_CONFIG"] = str(server.data_dir / "no-config.yaml")
    return subprocess.Popen(
        [AIPAAS, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_watch_wait_logs_rerun_cancel(sqlite_server: ServerProcess) -> None:
    server = sqlite_server
    server.cli("apply", "-f", "-", input=SETUP)
    # The watch outlives the whole test (it is ended below): on a loaded machine the steps
    # before hello-2 succeeds can take well over a minute.
    watcher = watch(
        server, "get", "jobs", "-t", "acme", "-w", "--output-watch-events", "--timeout", "600s"
    )
    assert watcher.stdout is not None
    header = watcher.stdout.readline()  # printed once the watch has its first (empty) state
    assert header.split()[:2] == ["EVENT", "NAME"], header
    code = "import time; time.sleep(1); print('hello from the task', flush=True)"
    server.cli("apply", "-f", "-", input=job("hello", code))
    # logs -f started while the job may still wait: it streams once it runs, and ends with it.
    logs = server.cli("logs", "-f", "job/hello", "-t", "acme")
    assert "main-0 | hello from the task" in logs.stdout
    done = server.cli(
        "wait", "job/hello", "--for=phase=Succeeded", "--timeout", "60s", "-t", "acme"
    )
    assert done.stdout.strip() == "job/hello condition met"

    rerun = server.cli("rerun", "job/hello", "-t", "acme")
    assert rerun.stdout.strip() == "job/hello-2 created (rerun of job/hello)"
    server.cli("wait", "job/hello-2", "--for=phase=Succeeded", "--timeout", "60s", "-t", "acme")
    assert server.phase("hello") == "Succeeded"  # the original is kept

    # A job no node can hold (GPUs on a CPU-only server): logs -f says why it waits.
    server.cli("apply", "-f", "-", input=job("big", "print(1)", gpus=1))
    waiting = server.cli(
        "logs", "-f", "job/big", "-t", "acme", "--start-timeout", "5s", check=False
    )
    assert waiting.returncode == 6
    first = waiting.stderr.splitlines()[0]
    assert first.startswith("waiting for job/big to start: ")
    assert server.job("big")["status"]["reason"] in first  # the scheduler's reason, as it said

    # Several at once, by name and by selector.
    sleeper = "import time; time.sleep(60)"
    for name in ("s1", "s2"):
        server.cli("apply", "-f", "-", input=job(name, sleeper))
    cancelled = server.cli("cancel", "job/s1", "job/s2", "-t", "acme")
    assert cancelled.stdout.splitlines() == ["job s1 cancelling", "job s2 cancelling"]
    for name in ("s1", "s2"):
        server.cli("wait", f"job/{name}", "--for=phase=Cancelled", "--timeout", "60s", "-t", "acme")
    leftover = server.cli("cancel", "-l", "suite=cli", "-t", "acme")
    assert leftover.stdout.splitlines() == ["job big cancelling"]

    events = server.cli("events", "job/hello", "-t", "acme", "-f", "--timeout", "2s")
    assert "Succeeded" in events.stdout

    watcher.terminate()
    out, _ = watcher.communicate(timeout=60)
    rows = [line.split() for line in out.splitlines()]
    hello = [row for row in rows if row[1] == "hello"]
    assert hello[0][0] == "ADDED" and hello[-1][4] == "Succeeded", out
    assert any(row[1] == "hello-2" and row[4] == "Succeeded" for row in rows), out
