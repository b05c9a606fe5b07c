"""Tasks in container images on the Slurm backend: a real `aipaas server --backend slurm`, a
real Slurm cluster (slurm_cluster.py) and podman on its nodes (this host). A job whose task
names an image built in the test runs in it, sees the GPUs Slurm gave it, its dataset at
mountPath and its working directory; a task over its memory limit ends OOMKilled; a job's
setup runs before its tasks and a failing one fails the task saying setup."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aipaas.backends import containers
from tests.integration.slurm_cluster import SlurmCluster, slurm_cluster
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

__all__ = ["slurm_cluster"]  # the fixture, used by name

pytestmark = skip_unless_available()


@pytest.fixture
def slurm_server(tmp_path: Path, slurm_cluster: SlurmCluster) -> Iterator[ServerProcess]:
    build_image()
    root = dataset_root()
    server = ServerProcess(
        tmp_path / "data",
        backend="slurm",
        extra=["--slurm-conf", str(slurm_cluster.conf)],
        env={"AIPAAS_DATASET_FILE_ROOTS": str(root)},
    ).start()
    with server.http() as client:
        client.post("/apply", content=setup_objects(root)).raise_for_status()
    yield server
    server.stop()


def apply(server: ServerProcess, text: str) -> None:
    with server.http() as client:
        answer = client.post("/apply", content=text)
        assert answer.status_code < 300, answer.text


def test_slurm_tasks_in_an_image_see_gpus_dataset_workdir_and_end_oomkilled_over_limit(
    slurm_server: ServerProcess,
) -> None:
    # One cluster for the module's checks: starting one takes seconds on a loaded machine.
    apply(slurm_server, seeing_job("sees", gpus=2))
    apply(slurm_server, hog_job("hog"))
    slurm_server.wait_phase("sees", "Succeeded", timeout=120)
    env = seen(slurm_server.cli("logs", "job/sees", "-t", "acme").stdout)
    assert sorted(env["gpus"].split(",")) == ["0", "1"], env  # the two Slurm bound
    assert env["data"] == DATA.strip()
    assert env["datavar"] == "/data/corpus"
    assert env["pwd"] == env["workdir"] and env["workdir"].startswith("/"), env
    assert env["wrote"] == "written"
    assert env["rank"] == "0"
    task = slurm_server.wait_phase("hog", "Failed", timeout=120)["status"]["tasks"][0]
    assert task["exitCode"] == 137
    assert task["message"].startswith("OOMKilled: over its memory limit"), task

    prepared = {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "metadata": {"name": "prepared", "tenant": "acme"},
        "spec": {
            "queue": "research",
            "setup": ['echo ran >> "$AIPAAS_SETUP_DIR/runs"'],
            "tasks": [
                {
                    "name": "w",
                    "image": IMAGE,
                    "command": ["sh", "-c", 'echo "runs=$(wc -l < "$AIPAAS_SETUP_DIR/runs")"'],
                    "resources": {"cpu": 1, "memory": "32Mi"},
                },
                {
                    "name": "broken",
                    "command": ["sh", "-c", "echo never"],
                    "resources": {"cpu": 1, "memory": "32Mi"},
                },
            ],
        },
    }
    apply(slurm_server, json.dumps(prepared))
    slurm_server.wait_phase("prepared", "Succeeded", timeout=120)
    log = slurm_server.cli("logs", "job/prepared", "-t", "acme").stdout
    assert "runs=1" in log, log  # the setup's directory, seen in the image

    failing = json.loads(json.dumps(prepared))
    failing["metadata"]["name"] = "unprepared"
    failing["spec"]["setup"] = ["exit 4"]
    failing["spec"]["tasks"] = failing["spec"]["tasks"][1:]
    apply(slurm_server, json.dumps(failing))
    task = slurm_server.wait_phase("unprepared", "Failed", timeout=120)["status"]["tasks"][0]
    assert task["message"].startswith("setup failed"), task
    log = slurm_server.cli("logs", "job/unprepared", "-t", "acme").stdout
    assert "setup failed: command 1/1 (exit 4) exited with code 4" in log, log


def test_exec_runs_a_step_beside_a_running_slurm_task_on_the_host_and_in_its_image(
    slurm_server: ServerProcess,
) -> None:
    for name, image in (("hosted", None), ("boxed", IMAGE)):
        task: dict[str, object] = {
            "name": "w",
            "command": ["sh", "-c", "echo up; sleep 300"],
            "resources": {"cpu": 1, "memory": "32Mi"},
        }
        if image is not None:
            task["image"] = image
        job = {
            "apiVersion": "aipaas/v1",
            "kind": "Job",
            "metadata": {"name": name, "tenant": "acme"},
            "spec": {"queue": "research", "tasks": [task]},
        }
        apply(slurm_server, json.dumps(job))
    for name, want in (("hosted", "/bin/sh"), ("boxed", "/bin/busybox")):
        deadline = time.monotonic() + 90
        while "up" not in slurm_server.cli("logs", f"job/{name}", "-t", "acme").stdout:
            assert time.monotonic() < deadline, f"{name} never started"
            time.sleep(0.5)
        done = slurm_server.cli(
            "exec", f"job/{name}", "-t", "acme", "--", "sh", "-c", f'ls {want}; pwd; echo "$RANK"'
        )
        listed, cwd, rank = done.stdout.split()
        assert listed == want and rank == "0", done.stdout  # the task's variables too
        assert (
            cwd == slurm_server.cli("exec", f"job/{name}", "-t", "acme", "--", "pwd").stdout.strip()
        )
    with slurm_server.http() as client:  # not left running past the test
        for name in ("hosted", "boxed"):
            client.post(f"/jobs/{name}/cancel", params={"tenant": "acme"}).raise_for_status()
    for name in ("hosted", "boxed"):
        slurm_server.wait_phase(name, "Cancelled", timeout=90)


def test_a_cancelled_slurm_task_in_an_image_gets_one_sigterm_and_its_container_goes(
    slurm_server: ServerProcess,
) -> None:
    # It counts the SIGTERMs it gets in its directory and ignores them: only the SIGKILL ends
    # it (its output after a stop is not in the log on Slurm: podman's client ends on its own)
    script = (
        "n=0; trap 'n=$((n+1)); echo \"TERM $n\" >> signals' TERM; echo started; "
        "while true; do sleep 0.1; done"
    )
    job = {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "metadata": {"name": "stubborn", "tenant": "acme"},
        "spec": {
            "queue": "research",
            "terminationGracePeriodSeconds": 1,
            "tasks": [
                {
                    "name": "w",
                    "image": IMAGE,
                    "command": ["sh", "-c", script],
                    "resources": {"cpu": 1, "memory": "32Mi"},
                }
            ],
        },
    }
    apply(slurm_server, json.dumps(job))
    deadline = time.monotonic() + 90
    while "started" not in slurm_server.cli("logs", "job/stubborn", "-t", "acme").stdout:
        assert time.monotonic() < deadline, "the task never started"
        time.sleep(0.5)
    with slurm_server.http() as client:
        client.post("/jobs/stubborn/cancel", params={"tenant": "acme"}).raise_for_status()
    slurm_server.wait_phase("stubborn", "Cancelled", timeout=90)
    uid = slurm_server.job("stubborn")["metadata"]["uid"]  # names the task's container
    deadline = time.monotonic() + 30
    while True:
        seen = [p.read_text() for p in slurm_server.data_dir.glob("run/slurm/workdirs/*/signals")]
        left = subprocess.run(
            [*containers.podman(), "ps", "-q", "--filter", f"name={uid}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if (seen and not left) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert seen == ["TERM 1\n"], seen  # one SIGTERM, then the SIGKILL after the grace
    assert not left, "the container outlived its cancelled Slurm job"
