"""A task cannot reach the platform's secrets: a real server as root (as in CI), tasks that try.

Each attack is a job; the operating system refuses it (the task's log says Permission denied and
the job fails). The data directory, the operator's home and the task root lie under a directory
every user may enter, so what stops a task is the platform's own modes and users, not the test's
temporary directory.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server_process import ServerProcess

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="tasks get their own users only under a root server (CI runs as root); the "
    "non-root case is covered by tests/unit/backends/test_task_isolation_unit.py",
)

MARKER = "AIPAAS_SECRET_MARKER"
SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: other}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: lab, tenant: other}
"""


def job(name: str, script: str, *, tenant: str = "acme", working_dir: str | None = None) -> str:
    queue = {"acme": "research", "other": "lab"}[tenant]
    extra = f"      workingDir: {json.dumps(working_dir)}\n" if working_dir else ""
    return (
        "---\napiVersion: aipaas/v1\nkind: Job\n"
        f"metadata: {{name: {name}, tenant: {tenant}}}\n"
        f"spec:\n  queue: {queue}\n  tasks:\n    - name: worker\n      replicas: 1\n"
        f"      command: [sh, -c, {json.dumps(script)}]\n{extra}"
        "      resources: {cpu: 100m, memory: 64Mi}\n"
    )


class Place:
    """Where everything lies: all under one directory any user may enter."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="aipaas-isolation-"))
        self.base.chmod(0o755)
        self.data = self.base / "data"
        self.tasks = self.base / "tasks"
        self.home = self.base / "operator"  # the person who runs `aipaas up`
        self.home.mkdir(mode=0o755)
        # A CLI config left readable by an older version: `up` must take it back to 0600.
        self.config = self.home / ".config" / "aipaas" / "config.yaml"
        self.config.parent.mkdir(parents=True)
        self.config.parent.parent.chmod(0o755)
        self.config.parent.chmod(0o755)
        self.config.write_text("url: http://old\n")
        self.config.chmod(0o644)


@pytest.fixture
def place() -> Iterator[Place]:
    where = Place()
    yield where
    shutil.rmtree(where.base, ignore_errors=True)


@pytest.fixture
def server(place: Place) -> Iterator[ServerProcess]:
    env = {
        MARKER: "do-not-leak-42",
        "HOME": str(place.home),
        "AIPAAS_TASK_ROOT": str(place.tasks),
        "AIPAAS_CONFIG": "",  # `up` writes to the operator's own config directory
        "XDG_CONFIG_HOME": "",
    }
    process = ServerProcess(place.data, env=env, verb="up").start()
    process.cli("apply", "-f", "-", input=SETUP)
    yield process
    process.stop()


def log_of(server: ServerProcess, name: str, tenant: str = "acme") -> str:
    return server.cli("logs", f"job/{name}", "--tenant", tenant).stdout


def test_up_writes_an_owner_only_config_and_private_data(
    place: Place, server: ServerProcess
) -> None:
    assert "token: integration-admin-token" in place.config.read_text()
    assert place.config.stat().st_mode & 0o777 == 0o600
    assert place.data.stat().st_mode & 0o777 == 0o700
    assert (place.data / "admin-token").stat().st_mode & 0o777 == 0o600
    assert not place.tasks.is_relative_to(place.data)
    # The Node says how tasks are isolated and what NVML found.
    (node,) = [n for n in server.cli_json("get", "nodes") if n["spec"]["backend"] == "local"]
    annotations = node["metadata"]["annotations"]
    assert annotations["aipaas.dev/task-isolation"].startswith("per-tenant users (aipaas-t-")
    assert "NVML" in annotations["aipaas.dev/gpu-discovery"]  # its GPUs, or why none


def test_a_task_reaches_no_secret(place: Place, server: ServerProcess) -> None:
    # Another tenant's job leaves a log and a file in its working directory.
    server.cli(
        "apply",
        "-f",
        "-",
        input=job("theirs", "echo their-secret; echo x > mine.txt", tenant="other"),
    )
    theirs = server.wait_phase("theirs", "Succeeded", tenant="other")
    uid8 = theirs["metadata"]["uid"][:8]
    their_log = place.data / "logs" / "other" / f"theirs-{uid8}" / "worker-0.log"
    assert their_log.read_text() == "their-secret\n"  # the path the attack below aims at

    attacks = {
        "token": f"cat {place.data / 'admin-token'}",
        "relative-token": "cat ../../admin-token || cat ../../../data/admin-token",
        "config": f"cat {place.config}",
        "database": f"cat {place.data / 'aipaas.db'} > /dev/null",
        "data-dir": f"ls {place.data}",
        "their-log": f"cat {their_log}",
        "their-dir": f"ls {place.tasks / 'other'}",
    }
    manifest = "".join(job(name, script) for name, script in attacks.items())
    manifest += job("escape", "cat admin-token", working_dir=str(place.data))
    server.cli("apply", "-f", "-", input=manifest)
    for name in [*attacks, "escape"]:
        server.wait_phase(name, "Failed")
    for name in attacks:
        text = log_of(server, name)
        if name == "relative-token":
            assert "No such file or directory" in text or "Permission denied" in text, text
        else:
            assert "Permission denied" in text, (name, text)
        assert "integration-admin-token" not in text and "their-secret" not in text
    escaped = log_of(server, "escape")
    assert f"cannot enter the working directory {place.data}" in escaped
    assert "Permission denied" in escaped


def test_a_task_has_its_own_user_home_and_environment(place: Place, server: ServerProcess) -> None:
    probe = 'env; echo "ids uid=$(id -u) pwd=$(pwd) groups=$(id -G | tr " " ,)"'
    manifest = job("mine", probe) + job("theirs", probe, tenant="other")
    server.cli("apply", "-f", "-", input=manifest)
    server.wait_phase("mine", "Succeeded")
    server.wait_phase("theirs", "Succeeded", tenant="other")
    ours, other = lines(log_of(server, "mine")), lines(log_of(server, "theirs", "other"))

    env = dict(line.split("=", 1) for line in ours if "=" in line and not line.startswith("ids "))
    # The server's variables: none (the job's own AIPAAS_JOB, AIPAAS_TASK... are the task's).
    server_env = {**os.environ, **server.env, "AIPAAS_BOOTSTRAP_TOKEN": "x"}
    assert not {"AIPAAS_BOOTSTRAP_TOKEN", "AIPAAS_TASK_ROOT", MARKER, "AIPAAS_CONFIG"} & set(env)
    inherited = {k for k, v in env.items() if server_env.get(k) == v} - {"LANG", "PYTHONUNBUFFERED"}
    assert not inherited, inherited
    assert not any("do-not-leak-42" in line or "integration-admin" in line for line in ours)
    assert env["PATH"] != os.environ["PATH"]  # not the server's (it points into /root)
    assert env["HOME"] not in (str(place.home), "/root")
    home = Path(env["HOME"])
    assert home.parent == place.tasks / "acme"
    assert env["USER"] == env["LOGNAME"] == "aipaas-t-acme"
    assert (env["RANK"], env["CUDA_VISIBLE_DEVICES"]) == ("0", "")

    acme, theirs = ids(ours), ids(other)
    assert acme["uid"] != "0" and theirs["uid"] != "0"
    assert acme["uid"] != theirs["uid"]  # one user per tenant
    assert "," not in acme["groups"]  # its own group only: no supplementary group
    assert acme["pwd"] == str(home)
    tenant_dir = (place.tasks / "acme").stat()
    assert str(tenant_dir.st_uid) == acme["uid"] and tenant_dir.st_mode & 0o777 == 0o700


def lines(log: str) -> list[str]:
    """A job's log without the task prefix ("worker-0 | ")."""
    return [line.split(" | ", 1)[-1] for line in log.splitlines()]


def ids(log: list[str]) -> dict[str, str]:
    line = next(x for x in log if x.startswith("ids "))
    return dict(item.split("=", 1) for item in line.split()[1:])
