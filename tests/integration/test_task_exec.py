"""`aipaas exec` into a running task, through a real root server on the local backend: it
prints the task's hostname and runs as the task's user in its working directory, on the host
and inside the task's container; a member of another tenant is told the job does not exist; a
viewer of the job's tenant is refused; a task that is not running is said to be so."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.integration.task_images import IMAGE, build_image, unavailable_reason
from tests.support.server_process import SETUP, ServerProcess

USERS = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: globex}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: mia, tenant: acme}
spec: {role: member}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: vera, tenant: acme}
spec: {role: viewer}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: gus, tenant: globex}
spec: {role: tenant-admin}
"""


def sleeper(name: str, image: str | None = None) -> str:
    task: dict[str, object] = {
        "name": "w",
        "command": ["sleep", "600"],
        "resources": {"cpu": "100m", "memory": "32Mi"},
    }
    if image is not None:
        task["image"] = image
    return json.dumps(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Job",
            "metadata": {"name": name, "tenant": "acme"},
            "spec": {"queue": "research", "terminationGracePeriodSeconds": 1, "tasks": [task]},
        }
    )


class World:
    def __init__(self, server: ServerProcess, tokens: dict[str, str]) -> None:
        self.server = server
        self.tokens = tokens

    def cancel_all(self) -> None:
        with self.server.http() as client:
            jobs = client.get("/jobs", params={"tenant": "acme"}).json()["items"]
            unfinished = [
                job["metadata"]["name"]
                for job in jobs
                if (job.get("status") or {}).get("phase") in ("Pending", "Running")
            ]
            for name in unfinished:
                client.post(f"/jobs/{name}/cancel", params={"tenant": "acme"})
        for name in unfinished:
            self.server.wait_phase(name, "Cancelled", timeout=60)

    def running(self, name: str) -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            tasks = (self.server.job(name).get("status") or {}).get("tasks") or []
            if tasks and tasks[0].get("phase") == "Running":
                return
            time.sleep(0.2)
        raise AssertionError(f"job {name} never ran: {self.server.job(name)}")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    server = ServerProcess(tmp_path_factory.mktemp("exec")).start()
    tokens = {}
    with server.http() as client:
        for text in (SETUP, USERS):
            client.post("/apply", content=text).raise_for_status()
        for user, tenant in (("mia", "acme"), ("vera", "acme"), ("gus", "globex")):
            answer = client.post("/tokens", json={"user": user, "tenant": tenant})
            answer.raise_for_status()
            tokens[user] = answer.json()["token"]
    world = World(server, tokens)
    try:
        yield world
    finally:
        world.cancel_all()  # a container outlives its runner, which close() SIGKILLs
        server.close()


def test_exec_prints_a_running_tasks_hostname_as_its_user_in_its_directory(
    world: World,
) -> None:
    with world.server.http() as client:
        client.post("/apply", content=sleeper("host")).raise_for_status()
    world.running("host")
    done = world.server.cli(
        "exec", "job/host", "-t", "acme", "--", "hostname", token=world.tokens["mia"]
    )
    assert done.stdout.strip() == socket.gethostname()
    where = world.server.cli(
        "exec",
        "job/host",
        "--",
        "sh",
        "-c",
        'echo "$(id -un) $(pwd) $AIPAAS_WORKDIR"',
        token=world.tokens["mia"],
    )
    user, cwd, workdir = where.stdout.split()
    assert user.startswith("aipaas-") and cwd == workdir, where.stdout  # the tenant's user
    failed = world.server.cli("exec", "job/host", "--", "sh", "-c", "exit 7", check=False)
    assert failed.returncode == 7  # the command's exit code is exec's


def test_exec_runs_inside_the_tasks_container(world: World) -> None:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    build_image()
    with world.server.http() as client:
        client.post("/apply", content=sleeper("boxed", IMAGE)).raise_for_status()
    world.running("boxed")
    deadline = time.monotonic() + 30
    while True:  # Running as soon as podman starts; the container a moment later
        done = world.server.cli(
            "exec", "job/boxed", "--", "sh", "-c", "ls /bin/busybox && hostname", check=False
        )
        if done.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["/bin/busybox", socket.gethostname()]


def test_another_tenant_is_told_the_job_does_not_exist(world: World) -> None:
    with world.server.http() as client:
        client.post("/apply", content=sleeper("private")).raise_for_status()
    world.running("private")
    with world.server.http(world.tokens["gus"]) as client:
        answer = client.post(
            "/jobs/private/exec", params={"tenant": "acme"}, json={"command": ["hostname"]}
        )
    assert answer.status_code == 404, answer.text
    refused = world.server.cli(
        "exec",
        "job/private",
        "-t",
        "acme",
        "--",
        "hostname",
        token=world.tokens["gus"],
        check=False,
    )
    assert refused.returncode != 0 and "not found" in refused.stderr


def test_a_viewer_may_not_exec(world: World) -> None:
    # its own job: the role is refused before the task's phase is looked at
    with world.server.http() as client:
        client.post("/apply", content=sleeper("viewed")).raise_for_status()
    with world.server.http(world.tokens["vera"]) as client:
        assert client.get("/jobs/viewed").status_code == 200  # the viewer sees the job
        answer = client.post("/jobs/viewed/exec", json={"command": ["hostname"]})
    assert answer.status_code == 403, answer.text
    assert "may not run commands" in answer.json()["message"]


def test_exec_into_a_task_that_is_not_running_says_so(world: World) -> None:
    # a job of its own: under xdist another test's job may live in another worker's server
    with world.server.http() as client:
        client.post("/apply", content=sleeper("ended")).raise_for_status()
    world.running("ended")
    with world.server.http() as client:
        client.post("/jobs/ended/cancel", params={"tenant": "acme"}).raise_for_status()
    world.server.wait_phase("ended", "Cancelled", timeout=60)
    with world.server.http(world.tokens["mia"]) as client:
        answer = client.post("/jobs/ended/exec", json={"command": ["hostname"], "task": "w-0"})
    assert answer.status_code == 409, answer.text
    assert "not running" in answer.json()["message"]
