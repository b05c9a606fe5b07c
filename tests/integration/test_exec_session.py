"""`aipaas exec -i` (and `--tty`): an interactive session in a running task, through a real root
server on the local backend. The session's input reaches the command and its output comes back
line by line, as the task's user on the task's host; the command's exit code is the CLI's; a
terminal session has a pty whose Ctrl-C reaches the foreground command; cancelling the task
ends the session. Every refusal happens at the WebSocket handshake, before anything runs: a
member of another tenant is told the job does not exist, a viewer is refused, a bad or missing
token is unauthenticated, a task that is not running is said to be so.

Every read is bounded: a line is waited for at most READ_SECONDS, a process at most
END_SECONDS, so a session that never answers fails the test instead of hanging it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from server_process import AIPAAS, SETUP, ServerProcess
from test_task_exec import USERS, World, sleeper
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

READ_SECONDS = 30.0
END_SECONDS = 60.0


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    server = ServerProcess(tmp_path_factory.mktemp("session")).start()
    tokens = {}
    with server.http() as client:
        for text in (SETUP, USERS):
            client.post("/apply", content=text).raise_for_status()
        for user, tenant in (("mia", "acme"), ("vera", "acme"), ("gus", "globex")):
            answer = client.post("/tokens", json={"user": user, "tenant": tenant})
            answer.raise_for_status()
            tokens[user] = answer.json()["token"]
        client.post("/apply", content=sleeper("shared")).raise_for_status()
    world = World(server, tokens)
    world.running("shared")
    try:
        yield world
    finally:
        world.cancel_all()
        server.close()


class Session:
    """`aipaas exec -i ...` as a process whose output is read line by line, each read bounded."""

    def __init__(self, world: World, *args: str, token: str) -> None:
        env = {
            **os.environ,
            "AIPAAS_URL": world.server.url,
            "AIPAAS_TOKEN": token,
            "AIPAAS_CONFIG": str(world.server.data_dir / "no-config.yaml"),
        }
        self.process = subprocess.Popen(
            [AIPAAS, "exec", *args],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.put(raw.decode(errors="replace").rstrip("\r\n"))
        self.lines.put(None)

    def send(self, data: str | bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data.encode() if isinstance(data, str) else data)
        self.process.stdin.flush()

    def line_matching(self, pattern: str) -> re.Match[str]:
        """The first line from now on that matches ``pattern``; fails after READ_SECONDS."""
        deadline = time.monotonic() + READ_SECONDS
        seen: list[str] = []
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            seen.append(line)
            if found := re.search(pattern, line):
                return found
        raise AssertionError(f"no line matched {pattern!r}; got {seen}; {self._stderr()}")

    def end(self) -> tuple[int, str]:
        """The CLI's exit code and its standard error; kills it after END_SECONDS."""
        try:
            code = self.process.wait(timeout=END_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the session did not end: {self._stderr()}") from None
        return code, self._stderr()

    def _stderr(self) -> str:
        if self.process.poll() is None:
            return "(still running)"
        assert self.process.stderr is not None
        return self.process.stderr.read().decode(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@contextlib.contextmanager
def session(world: World, *args: str, token: str) -> Iterator[Session]:
    opened = Session(world, *args, token=token)
    try:
        yield opened
    finally:
        opened.close()


def task_uid(world: World, job: str) -> str:
    done = world.server.cli("exec", "job/" + job, "--", "id", "-u", token=world.tokens["mia"])
    return done.stdout.strip()


def handshake_status(world: World, job: str, token: str | None, **query: str) -> int:
    """The HTTP status the WebSocket handshake is refused with (fails if it is accepted)."""
    params = [("command", part) for part in query.pop("command", "hostname").split()]
    params += list(query.items())
    url = f"{world.server.url.replace('http://', 'ws://')}/api/v1/jobs/{job}/exec?"
    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    with pytest.raises(InvalidStatus) as refused:
        connect(url + urlencode(params), additional_headers=headers, open_timeout=READ_SECONDS)
    return refused.value.response.status_code


def test_a_shell_session_answers_each_line_as_the_tasks_user_and_exits_with_its_code(
    world: World,
) -> None:
    uid = task_uid(world, "shared")
    assert uid.isdigit() and uid != "0", uid  # the tenant's user, not the server's root
    with session(world, "-i", "job/shared", "--", "sh", token=world.tokens["mia"]) as shell:
        shell.send("hostname\n")
        assert shell.line_matching(".+").group(0) == socket.gethostname()
        shell.send("id -u\n")
        assert shell.line_matching(".+").group(0) == uid
        shell.send("exit 3\n")
        code, _ = shell.end()
    assert code == 3


def test_end_of_input_ends_a_command_that_reads_it_all(world: World) -> None:
    with session(world, "-i", "job/shared", "--", "wc", "-l", token=world.tokens["mia"]) as count:
        count.send("one\ntwo\n")
        assert count.process.stdin is not None
        count.process.stdin.close()  # the CLI sends end of input; wc then prints and ends
        assert count.line_matching(r"^\s*\d+\s*$").group(0).strip() == "2"
        assert count.end()[0] == 0


def test_a_terminal_session_has_a_pty_whose_ctrl_c_reaches_the_foreground_command(
    world: World,
) -> None:
    args = ("-i", "--tty", "job/shared", "--", "sh")
    with session(world, *args, token=world.tokens["mia"]) as shell:
        shell.send('echo "IN-$(tty)"\n')
        assert shell.line_matching(r"IN-/dev/pts/\d+")
        shell.send('echo "SIZE-$(stty size)"\n')
        assert shell.line_matching(r"SIZE-24 80")  # the CLI's output is no terminal: 24x80
        shell.send("sleep 300\n")
        time.sleep(1)  # the sleep in the foreground first
        shell.send(b"\x03")  # Ctrl-C, as a terminal in raw mode sends it
        shell.send('echo "AFTER-$?"\n')
        assert shell.line_matching(r"AFTER-130")  # sleep ended by SIGINT (128 + 2)
        shell.send("exit 5\n")
        assert shell.end()[0] == 5


def test_cancelling_the_task_ends_its_session(world: World) -> None:
    with world.server.http() as client:
        client.post("/apply", content=sleeper("doomed")).raise_for_status()
    world.running("doomed")
    with session(world, "-i", "job/doomed", "--", "sh", token=world.tokens["mia"]) as shell:
        shell.send("echo READY\n")
        assert shell.line_matching("READY")
        with world.server.http() as client:
            client.post("/jobs/doomed/cancel", params={"tenant": "acme"}).raise_for_status()
        code, stderr = shell.end()
    assert code == 137 and "stopped running" in stderr, stderr


@pytest.mark.parametrize(
    "tenant",
    [
        pytest.param("acme", id="naming the job's tenant"),
        pytest.param("globex", id="naming the caller's own tenant"),
        pytest.param("", id="naming no tenant"),
    ],
)
def test_another_tenant_is_told_at_the_handshake_the_job_does_not_exist(
    world: World, tenant: str
) -> None:
    marker = Path("/tmp") / f"aipaas-session-{uuid.uuid4().hex}"
    query = {"command": f"touch {marker}", **({"tenant": tenant} if tenant else {})}
    assert handshake_status(world, "shared", world.tokens["gus"], **query) == 404
    time.sleep(1)  # a command that had started would have touched it by now
    assert not marker.exists()  # nothing ran


def test_another_tenants_cli_session_fails_as_not_found(world: World) -> None:
    args = ("-i", "job/shared", "-t", "acme", "--", "sh")
    with session(world, *args, token=world.tokens["gus"]) as refused:
        code, stderr = refused.end()
    assert code == 3 and "not found" in stderr, stderr  # the CLI's exit code for not found


def test_a_viewer_is_refused_at_the_handshake(world: World) -> None:
    assert handshake_status(world, "shared", world.tokens["vera"]) == 403


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("not-a-token", id="an unknown token"),
        pytest.param(None, id="no token"),
    ],
)
def test_a_bad_or_missing_token_is_refused_at_the_handshake(
    world: World, token: str | None
) -> None:
    assert handshake_status(world, "shared", token) == 401


def test_a_query_without_a_command_is_invalid(world: World) -> None:
    assert handshake_status(world, "shared", world.tokens["mia"], command="") == 422


def test_a_session_into_a_task_that_is_not_running_is_a_conflict(world: World) -> None:
    with world.server.http() as client:
        client.post("/apply", content=sleeper("finished")).raise_for_status()
    world.running("finished")
    with world.server.http() as client:
        client.post("/jobs/finished/cancel", params={"tenant": "acme"}).raise_for_status()
    world.server.wait_phase("finished", "Cancelled", timeout=60)
    assert handshake_status(world, "finished", world.tokens["mia"]) == 409
