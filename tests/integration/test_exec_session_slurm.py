"""`aipaas exec -i` on the Slurm backend (real daemons: slurm_cluster.py): the session is a step
of the task's Slurm job beside its batch step (``srun --overlap``; ``--pty`` with ``--tty``),
with the task's variables; its input reaches the command, its output comes back line by line,
its exit code is the CLI's; Ctrl-C in a terminal session reaches the foreground command; the
session ends when the task is cancelled; a task in an image is entered with ``podman exec``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.exec_sessions import session
from tests.integration.slurm_cluster import SlurmCluster, slurm_cluster
from tests.integration.task_images import IMAGE, build_image, unavailable_reason
from tests.support.server_process import ADMIN, SETUP, ServerProcess

__all__ = ["slurm_cluster"]  # the fixture, used by name


def sleeper(name: str, image: str | None = None) -> str:
    task: dict[str, object] = {
        "name": "w",
        "command": ["sh", "-c", "echo up; sleep 600"],
        "resources": {"cpu": 1, "memory": "32Mi"},
    }
    if image is not None:
        task["image"] = image
    return json.dumps(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Job",
            "metadata": {"name": name, "tenant": "acme"},
            "spec": {"queue": "research", "tasks": [task]},
        }
    )


@pytest.fixture
def slurm_server(tmp_path: Path, slurm_cluster: SlurmCluster) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path / "data", backend="slurm", extra=["--slurm-conf", str(slurm_cluster.conf)]
    ).start()
    with server.http() as client:
        client.post("/apply", content=SETUP).raise_for_status()
    yield server
    server.stop()


def started(server: ServerProcess, name: str, image: str | None = None) -> None:
    with server.http() as client:
        client.post("/apply", content=sleeper(name, image)).raise_for_status()
    deadline = time.monotonic() + 90
    while "up" not in server.cli("logs", f"job/{name}", "-t", "acme").stdout:
        assert time.monotonic() < deadline, f"{name} never started"
        time.sleep(0.5)


def test_slurm_sessions_with_and_without_a_terminal_and_their_end_on_cancel(
    slurm_server: ServerProcess,
) -> None:
    started(slurm_server, "steps")
    args = ("-i", "job/steps", "-t", "acme", "--", "sh")
    with session(slurm_server, *args, token=ADMIN) as shell:
        shell.send('echo "RANK-$RANK-$SLURM_JOB_ID"\n')
        assert shell.line_matching(r"RANK-0-\d+")  # the task's variables, in its Slurm job
        shell.send("exit 3\n")
        assert shell.end()[0] == 3
    tty_args = ("-i", "--tty", "job/steps", "-t", "acme", "--", "sh")
    with session(slurm_server, *tty_args, token=ADMIN) as shell:
        shell.send('echo "IN-$(tty)"\n')
        assert shell.line_matching(r"IN-/dev/pts/\d+")
        shell.send("sleep 300\n")
        time.sleep(1)
        shell.send(b"\x03")  # Ctrl-C
        shell.send('echo "AFTER-$?"\n')
        assert shell.line_matching(r"AFTER-130")
        shell.send("exit 5\n")
        assert shell.end()[0] == 5
    with session(slurm_server, *args, token=ADMIN) as shell:
        shell.send("echo READY\n")
        assert shell.line_matching("READY")
        with slurm_server.http() as client:
            client.post("/jobs/steps/cancel", params={"tenant": "acme"}).raise_for_status()
        code, stderr = shell.end()
    # scancel ends the job's steps too (srun says SIGTERM's 143), or the server kills it (137)
    assert code in (137, 143) and "stopped running" in stderr, (code, stderr)
    slurm_server.wait_phase("steps", "Cancelled", timeout=90)


def test_a_slurm_session_in_a_tasks_image_runs_inside_its_container(
    slurm_server: ServerProcess,
) -> None:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    build_image()
    started(slurm_server, "boxed", IMAGE)
    for tty in ((), ("--tty",)):
        args = ("-i", *tty, "job/boxed", "-t", "acme", "--", "sh")
        with session(slurm_server, *args, token=ADMIN) as shell:
            shell.send('echo "IN-$(ls /bin/busybox)-$RANK"\n')
            assert shell.line_matching(r"IN-/bin/busybox-0")
            shell.send("exit 6\n")
            assert shell.end()[0] == 6
    with slurm_server.http() as client:
        client.post("/jobs/boxed/cancel", params={"tenant": "acme"}).raise_for_status()
    slurm_server.wait_phase("boxed", "Cancelled", timeout=90)
