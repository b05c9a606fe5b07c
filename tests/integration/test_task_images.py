"""Tasks in container images on the local backend, through a real root server: a job whose
task names an image built in the test (busybox-static imported from a root filesystem) runs in
it through podman, sees its GPUs variable, its dataset at mountPath and its working directory,
and runs as the tenant's user; a task over its memory limit ends OOMKilled; a stop sends one
SIGTERM; and a job's setup runs once per node before its tasks, in the task's image."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.integration.task_images import (
    DATA,
    IMAGE,
    build_image,
    dataset_root,
    hog_job,
    seeing_job,
    seen,
    setup_objects,
    skip_unless_available,
)
from tests.support.server_process import ServerProcess

pytestmark = skip_unless_available()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    build_image()
    root = dataset_root()
    # "demo": this machine's local node offers fake GPUs, so a task asking for one runs here
    process = ServerProcess(
        tmp_path_factory.mktemp("images"),
        backend="demo",
        env={"AIPAAS_DATASET_FILE_ROOTS": str(root)},
    ).start()
    with process.http() as client:
        client.post("/apply", content=setup_objects(root)).raise_for_status()
    try:
        yield process
    finally:
        process.close()


def apply(server: ServerProcess, text: str) -> None:
    with server.http() as client:
        answer = client.post("/apply", content=text)
        assert answer.status_code < 300, answer.text


def test_a_task_in_an_image_sees_its_gpus_dataset_and_working_directory(
    server: ServerProcess,
) -> None:
    apply(server, seeing_job("sees", gpus=1))
    server.wait_phase("sees", "Succeeded", timeout=120)
    env = seen(server.cli("logs", "job/sees", "-t", "acme").stdout)
    assert env["gpus"] == "0", env  # its one (fake) GPU, as on the host
    assert env["data"] == DATA.strip()
    assert env["datavar"] == "/data/corpus"  # the variable says where the container sees it
    assert env["pwd"] == env["workdir"] and env["workdir"].startswith("/"), env
    assert env["wrote"] == "written"  # its directory is its own, read-write
    assert env["uid"] != "0", env  # the tenant's user, not root


def test_a_task_in_an_image_over_its_memory_limit_ends_oomkilled(server: ServerProcess) -> None:
    apply(server, hog_job("hog"))
    status = server.wait_phase("hog", "Failed", timeout=120)["status"]
    task = status["tasks"][0]
    assert task["exitCode"] == 137
    assert task["message"].startswith("OOMKilled: over its memory limit"), task


def test_a_stopped_task_in_an_image_gets_one_sigterm_then_sigkill_after_its_grace(
    server: ServerProcess,
) -> None:
    # It counts the SIGTERMs it gets and ignores them: only the SIGKILL after the grace ends it.
    script = (
        "n=0; trap 'n=$((n+1)); echo \"TERM $n\"' TERM; echo started; "
        "while true; do sleep 0.1; done"
    )
    job = {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "metadata": {"name": "sleeper", "tenant": "acme"},
        "spec": {
            "queue": "research",
            "terminationGracePeriodSeconds": 3,
            "tasks": [
                {
                    "name": "w",
                    "image": IMAGE,
                    "command": ["sh", "-c", script],
                    "resources": {"cpu": "100m", "memory": "32Mi"},
                }
            ],
        },
    }
    apply(server, json.dumps(job))
    deadline = time.monotonic() + 60
    while "started" not in server.cli("logs", "job/sleeper", "-t", "acme").stdout:
        assert time.monotonic() < deadline, "the task never started"
        time.sleep(0.2)
    stopped_at = time.monotonic()
    with server.http() as client:
        for _ in range(3):  # asked again and again: still one SIGTERM
            client.post("/jobs/sleeper/cancel", params={"tenant": "acme"}).raise_for_status()
            time.sleep(0.3)
    server.wait_phase("sleeper", "Cancelled", timeout=60)
    log = server.cli("logs", "job/sleeper", "-t", "acme").stdout
    assert "TERM 1" in log and "TERM 2" not in log, log
    assert time.monotonic() - stopped_at >= 3  # the grace was given before the SIGKILL


def test_a_jobs_setup_runs_once_per_node_before_its_tasks_in_their_image(
    server: ServerProcess,
) -> None:
    job = {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "metadata": {"name": "prepared", "tenant": "acme"},
        "spec": {
            "queue": "research",
            "setup": ['echo ran >> "$AIPAAS_SETUP_DIR/runs"', 'touch "$AIPAAS_SETUP_DIR/env"'],
            "tasks": [
                {
                    "name": "w",
                    "replicas": 2,
                    "image": IMAGE,
                    "command": ["sh", "-c", 'echo "runs=$(wc -l < "$AIPAAS_SETUP_DIR/runs")"'],
                    "resources": {"cpu": "100m", "memory": "32Mi"},
                }
            ],
        },
    }
    apply(server, json.dumps(job))
    server.wait_phase("prepared", "Succeeded", timeout=120)
    log = server.cli("logs", "job/prepared", "-t", "acme").stdout
    runs = [line.rsplit("=", 1)[1].strip() for line in log.splitlines() if "runs=" in line]
    assert runs == ["1", "1"], log  # both tasks found the one setup's environment


def test_a_failing_setup_fails_the_task_saying_setup(server: ServerProcess) -> None:
    job = {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "metadata": {"name": "unprepared", "tenant": "acme"},
        "spec": {
            "queue": "research",
            "setup": ["echo preparing", "exit 3"],
            "tasks": [
                {
                    "name": "w",
                    "command": ["sh", "-c", "echo never"],
                    "resources": {"cpu": "100m", "memory": "32Mi"},
                }
            ],
        },
    }
    apply(server, json.dumps(job))
    task = server.wait_phase("unprepared", "Failed", timeout=120)["status"]["tasks"][0]
    assert task["message"].startswith("setup failed"), task
    log = server.cli("logs", "job/unprepared", "-t", "acme").stdout
    assert "setup failed: command 2/2 (exit 3) exited with code 3" in log, log
    assert "never" not in log.replace("echo never", "")
