"""Task isolation on the local backend, without a server: user names, the non-root case (a
server that cannot change identity says so), the scrubbed environment, private directories and
logs, a root-owned runner that ignores the job's variables, and links where a directory goes."""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from aipaas.backends.base import LaunchRequest, TaskState
from aipaas.backends.local import LocalBackend, TaskIsolation
from aipaas.backends.local.isolation import (
    ISOLATION_ANNOTATION,
    USER_NAME_MAX,
    IsolationError,
    TaskPlacer,
    default_task_root,
    user_name,
)
from aipaas.cli.control_runtime import _write_private
from aipaas.settings import Settings


def request(tmp: Path, rid: str, command: list[str], **options: object) -> LaunchRequest:
    base: dict[str, object] = {
        "request_id": rid,
        "task": "worker-0",
        "job": "j",
        "tenant": "acme",
        "node": "here",
        "command": tuple(command),
        "env": {"RANK": "0"},
        "working_dir": None,
        "gpus": (),
        "gpu_milli": 0,
        "log_path": str(tmp / "data" / "logs" / "acme" / f"{rid}.log"),
    }
    base.update(options)
    return LaunchRequest(**base)  # type: ignore[arg-type]


def finished(backend: LocalBackend, rid: str, timeout: float = 60) -> TaskState:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = backend.status([rid])[rid].state
        if state in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.LOST):
            return state
        time.sleep(0.05)
    raise AssertionError(f"{rid} never ended: {backend.status([rid])[rid]}")


def shared(tmp: Path) -> TaskIsolation:
    """What a server that is not root gets (simulated: the uid is given)."""
    return TaskIsolation.for_server(tmp / "tasks", server_uid=1000)


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(
        tmp_path / "data" / "run",
        node_name="here",
        cpu_milli=1000,
        memory_mib=1024,
        gpus=[],
        isolation=shared(tmp_path),
        environ={
            "PATH": os.environ["PATH"],
            "HOME": "/root",
            "USER": "server",
            "AIPAAS_TOKEN": "aip_secret",
            "AIPAAS_SECRET_MARKER": "x",
            "LANG": "C.UTF-8",
        },
    )


class TestUserNames:
    def test_short_and_long_tenants(self) -> None:
        assert user_name("acme") == "aipaas-t-acme"
        long_a, long_b = "a" * 40 + "-one", "a" * 40 + "-two"
        assert len(user_name(long_a)) <= USER_NAME_MAX
        assert user_name(long_a) != user_name(long_b)
        assert user_name(long_a) == user_name(long_a)  # the same user every time
        assert user_name("x" * 63).startswith("aipaas-t-xxxx")
        # A tenant named like another's shortened user does not get that user.
        shortened = user_name(long_a).removeprefix("aipaas-t-")
        assert user_name(shortened) != user_name(long_a)
        assert len(user_name(shortened)) <= USER_NAME_MAX


class TestPolicy:
    def test_root_separates_others_share(self, tmp_path: Path) -> None:
        assert TaskIsolation.for_server(tmp_path, server_uid=0).separate
        policy = shared(tmp_path)
        assert not policy.separate
        assert policy.describe().startswith("shared: tasks run as the server's own user")

    @pytest.mark.parametrize("user", ["root", "no-such-user-here"])
    def test_a_fixed_user_must_exist_and_be_unprivileged(self, tmp_path: Path, user: str) -> None:
        with pytest.raises(ValueError, match="task_user"):
            TaskIsolation.for_server(tmp_path, fixed_user=user, server_uid=0)

    def test_the_task_root_stays_out_of_the_data_directory(self, tmp_path: Path) -> None:
        with pytest.raises(ValidationError, match=r"task_root .* must lie outside"):
            Settings(data_dir=tmp_path / "data", task_root=tmp_path / "data" / "tasks")
        with pytest.raises(ValidationError, match="task_root"):
            Settings(data_dir=tmp_path / "data", task_root=tmp_path)

    def test_the_default_task_root(self, tmp_path: Path) -> None:
        data = tmp_path / ".aipaas"
        assert default_task_root(data, server_uid=1000) == tmp_path / ".aipaas-tasks"
        # Root: a place every task user can walk to (pytest's tmp, like /root, is private).
        as_root = default_task_root(data, server_uid=0)
        assert as_root.parent == Path("/var/lib/aipaas-tasks")
        assert as_root.name.startswith("aipaas-") and as_root != default_task_root(tmp_path, 0)


def test_a_server_that_is_not_root_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="aipaas.backends.local.backend"):
        local = LocalBackend(
            tmp_path / "run", node_name="here", gpus=[], isolation=shared(tmp_path)
        )
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and "tasks run as the server's own user" in said[0]
    annotation = local.inventory().nodes[0].annotations[ISOLATION_ANNOTATION]
    assert annotation.startswith("shared: tasks run as the server's own user")


def test_the_environment_is_built_from_nothing(backend: LocalBackend, tmp_path: Path) -> None:
    script = "import os, json; print(json.dumps(dict(os.environ)))"
    backend.start(request(tmp_path, "env", [sys.executable, "-c", script], env={"MINE": "1"}))
    assert finished(backend, "env") is TaskState.SUCCEEDED
    env = json.loads((tmp_path / "data" / "logs" / "acme" / "env.log").read_text())
    home = tmp_path / "tasks" / "acme" / "env"
    assert env == {
        "PATH": os.environ["PATH"],  # a server that is not root: its own PATH
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "USER": pwd.getpwuid(os.geteuid()).pw_name,
        "LOGNAME": pwd.getpwuid(os.geteuid()).pw_name,
        "MINE": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "AIPAAS_WORKDIR": str(home),  # the working directory that outlives restarts
        "PYTHONUNBUFFERED": "1",
    }


def test_directories_and_logs_are_private(backend: LocalBackend, tmp_path: Path) -> None:
    backend.start(request(tmp_path, "dirs", ["sh", "-c", "pwd; touch made; umask"]))
    assert finished(backend, "dirs") is TaskState.SUCCEEDED
    home = tmp_path / "tasks" / "acme" / "dirs"
    log = tmp_path / "data" / "logs" / "acme" / "dirs.log"
    assert log.read_text() == f"{home}\n0077\n"
    assert (home / "made").stat().st_mode & 0o777 == 0o600  # umask 077
    for directory in (home, home.parent, tmp_path / "tasks", log.parent):
        assert directory.stat().st_mode & 0o777 == 0o700, directory
    assert log.stat().st_mode & 0o777 == 0o600
    launch = tmp_path / "data" / "run" / "dirs" / "launch.json"
    assert launch.stat().st_mode & 0o777 == 0o600


def test_the_runner_ignores_the_jobs_python_variables(
    backend: LocalBackend, tmp_path: Path
) -> None:
    """The runner may be root: a job's PYTHONPATH must not run code in it."""
    trap = tmp_path / "trap"
    trap.mkdir()
    sprung = tmp_path / "sprung"
    (trap / "sitecustomize.py").write_text(f"open({str(sprung)!r}, 'w').write('root')\n")
    env = {"PYTHONPATH": str(trap), "PYTHONSTARTUP": str(trap / "sitecustomize.py")}
    backend.start(request(tmp_path, "trap", ["true"], env=env))
    assert finished(backend, "trap") is TaskState.SUCCEEDED
    assert not sprung.exists()


def test_a_working_directory_the_task_cannot_enter_fails_it(
    backend: LocalBackend, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere"
    backend.start(request(tmp_path, "cwd", ["true"], working_dir=str(missing)))
    assert finished(backend, "cwd") is TaskState.FAILED
    assert backend.status(["cwd"])["cwd"].exit_code == 127
    text = (tmp_path / "data" / "logs" / "acme" / "cwd.log").read_text()
    assert f"cannot enter the working directory {missing}" in text


def test_a_link_where_a_task_directory_goes_is_refused(tmp_path: Path) -> None:
    """A tenant's user owns its tenant directory and could plant a link at a future task's
    name: root must not follow it (it would chown what the link names)."""
    placer = TaskPlacer(shared(tmp_path))
    placer.prepare("acme", "first")
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o755)
    before = target.stat()
    (tmp_path / "tasks" / "acme" / "planted").symlink_to(target)
    with pytest.raises(IsolationError, match="planted: a symbolic link"):
        placer.prepare("acme", "planted")
    after = target.stat()
    assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid)


def test_a_refused_directory_fails_the_task_with_the_reason(
    backend: LocalBackend, tmp_path: Path
) -> None:
    (tmp_path / "tasks" / "acme").mkdir(parents=True)
    (tmp_path / "tasks" / "acme" / "linked").symlink_to(tmp_path)
    backend.start(request(tmp_path, "linked", ["true"]))
    assert finished(backend, "linked") is TaskState.FAILED
    text = (tmp_path / "data" / "logs" / "acme" / "linked.log").read_text()
    assert "a symbolic link" in text


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a task's user needs root")
def test_as_root_the_task_runs_as_the_tenants_user(tmp_path: Path) -> None:
    root = Path(tempfile.mkdtemp(prefix="aipaas-unit-"))  # under /tmp: others may enter
    root.chmod(0o755)
    local = LocalBackend(
        tmp_path / "data" / "run",
        node_name="here",
        gpus=[],
        isolation=TaskIsolation.for_server(root / "tasks", server_uid=0),
    )
    try:
        local.start(request(tmp_path, "who", ["sh", "-c", "id -u; id -G; echo $HOME"]))
        assert finished(local, "who") is TaskState.SUCCEEDED
        uid, groups, home = (tmp_path / "data/logs/acme/who.log").read_text().split("\n")[:3]
        account = pwd.getpwnam("aipaas-t-acme")
        assert (int(uid), groups) == (account.pw_uid, str(account.pw_gid))
        assert home == str(root / "tasks" / "acme" / "who")
        assert (root / "tasks" / "acme").stat().st_uid == account.pw_uid
        assert (root / "tasks").stat().st_mode & 0o777 == 0o711
        annotation = local.inventory().nodes[0].annotations[ISOLATION_ANNOTATION]
        assert annotation.startswith("per-tenant users")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_stop_during_start_up_leaves_nothing_running(
    backend: LocalBackend, tmp_path: Path
) -> None:
    """The runner takes the stop at any moment of its start: the command never gets to run."""
    marker = tmp_path / "ran"
    backend.start(request(tmp_path, "early", ["sh", "-c", f"sleep 1; touch {marker}"]))
    backend.stop("early", grace_seconds=2)
    assert finished(backend, "early") is TaskState.FAILED
    assert backend.status(["early"])["early"].exit_code == 143
    time.sleep(1.5)
    assert not marker.exists()


def test_a_task_root_task_users_cannot_reach_is_said_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    policy = TaskIsolation(private / "tasks", separate=True)
    with caplog.at_level(logging.WARNING, logger="aipaas.backends.local.isolation"):
        TaskPlacer(policy).check()
    (said,) = [r.getMessage() for r in caplog.records]
    assert "which other users cannot enter" in said and str(private / "tasks") in said
    assert (private / "tasks").stat().st_mode & 0o777 == 0o711


def test_the_cli_config_is_replaced_owner_only(tmp_path: Path) -> None:
    """`aipaas up` writes the token into the config of whoever started it: 0600, even over a
    file that was readable by others (written anew, never rewritten in place)."""
    config = tmp_path / "config" / "aipaas" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("token: old\n")
    config.chmod(0o644)
    _write_private(config, "token: new\n")
    assert config.read_text() == "token: new\n"
    assert config.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in config.parent.iterdir()] == ["config.yaml"]  # no temporary left


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a task's user needs root")
def test_a_fixed_task_user_runs_every_tenant(tmp_path: Path) -> None:
    root = Path(tempfile.mkdtemp(prefix="aipaas-unit-"))
    root.chmod(0o755)
    policy = TaskIsolation.for_server(root / "tasks", fixed_user="nobody", server_uid=0)
    local = LocalBackend(tmp_path / "data" / "run", node_name="here", gpus=[], isolation=policy)
    try:
        for tenant in ("acme", "beta"):
            local.start(request(tmp_path, tenant, ["id", "-un"], tenant=tenant))
            assert finished(local, tenant) is TaskState.SUCCEEDED
            log = tmp_path / "data" / "logs" / "acme" / f"{tenant}.log"
            assert log.read_text() == "nobody\n"
            assert (root / "tasks" / tenant).stat().st_uid == pwd.getpwnam("nobody").pw_uid
        annotation = local.inventory().nodes[0].annotations[ISOLATION_ANNOTATION]
        assert annotation == "user nobody: every task runs as this unprivileged user"
    finally:
        shutil.rmtree(root, ignore_errors=True)
