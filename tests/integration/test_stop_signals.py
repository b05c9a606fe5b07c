"""A stop through a real server (local backend): the task gets one SIGTERM, has the job's
grace period (``terminationGracePeriodSeconds``) to finish a checkpoint, and is SIGKILLed
only after it.

Before: the backend signalled the runner's whole group and the runner forwarded the signal
too, so a task saw two SIGTERMs 0.2 ms apart, and every cycle's repeated stop could send more;
the SIGKILL came after the controller's 5 s, whatever the job said.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from tests.support.server_process import TASK_PYTHON, ServerProcess, live_runners, shared_dir

# Counts the SIGTERMs it receives (one line each), spends 2 s writing a checkpoint on the
# first, then says it finished and exits 0.
CHECKPOINTER = """
import os, signal, sys, time
out = sys.argv[1]
def on_term(signum, frame):
    with open(os.path.join(out, "terms"), "a") as f:
        f.write("TERM\\n")
    if os.path.exists(os.path.join(out, "checkpointing")):
        return
    open(os.path.join(out, "checkpointing"), "w").close()
    for step in range(20):
        time.sleep(0.1)
    with open(os.path.join(out, "checkpoint"), "w") as f:
        f.write("complete")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
open(os.path.join(out, "ready"), "w").close()
while True:
    time.sleep(0.05)
"""

# Ignores SIGTERM: only the SIGKILL after the grace period ends it.
STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.path.join(sys.argv[1], "ready"), "w").close()
time.sleep(600)
"""


def job(name: str, script: str, out: Path, grace: int | None) -> str:
    grace_line = f"  terminationGracePeriodSeconds: {grace}\n" if grace is not None else ""
    return (
        "apiVersion: aipaas/v1\nkind: Job\n"
        f"metadata: {{name: {name}, tenant: acme}}\n"
        f"spec:\n  queue: research\n{grace_line}  tasks:\n    - name: worker\n"
        f"      command: [{TASK_PYTHON}, -c, {json.dumps(script)}, {out}]\n"
        "      resources: {cpu: 100m, memory: 64Mi}\n"
    )


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_a_stopped_task_gets_exactly_one_sigterm_and_finishes_its_checkpoint(
    tenant_server: ServerProcess,
) -> None:
    out = shared_dir()
    with tenant_server.http() as client:
        client.post("/apply", content=job("ckpt", CHECKPOINTER, out, 20)).raise_for_status()
        wait_for(out / "ready")
        # Cancelled three times while it checkpoints: the stop is asked for again, never
        # signalled again.
        for _ in range(3):
            client.post("/jobs/ckpt/cancel", params={"tenant": "acme"}).raise_for_status()
            time.sleep(0.5)
    # A stop sent again to the runner itself (what a restarted server's stop does) is not
    # passed on either.
    wait_for(out / "checkpointing")
    for pids in live_runners(tenant_server.data_dir.resolve() / "run").values():
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
    tenant_server.wait_phase("ckpt", "Cancelled", timeout=60)
    assert (out / "terms").read_text() == "TERM\n"
    assert (out / "checkpoint").read_text() == "complete"


def test_a_task_that_ignores_sigterm_is_killed_after_the_jobs_grace_period(
    tenant_server: ServerProcess,
) -> None:
    out = shared_dir()
    with tenant_server.http() as client:
        client.post("/apply", content=job("stubborn", STUBBORN, out, 3)).raise_for_status()
        wait_for(out / "ready")
        asked = time.monotonic()
        client.post("/jobs/stubborn/cancel", params={"tenant": "acme"}).raise_for_status()
    tenant_server.wait_phase("stubborn", "Cancelled", timeout=60)
    took = time.monotonic() - asked
    # Not before its 3 s, and long before the default 30 s or the backend's own margin.
    assert 3 <= took < 15, took
    with tenant_server.http() as client:
        log = client.get("/jobs/stubborn/logs", params={"tenant": "acme"}).text
    assert "still running 3s after SIGTERM: SIGKILL" in log


def test_the_grace_period_is_refused_out_of_range_naming_the_field(
    tenant_server: ServerProcess,
) -> None:
    with tenant_server.http() as client:
        answer = client.post("/apply", content=job("bad", STUBBORN, Path("/tmp"), -1))
    assert answer.status_code == 422
    assert "spec.terminationGracePeriodSeconds" in answer.text
