"""`aipaas exec -i` (and `--tty`): an interactive session in a running task, through a real root
server on the local backend. The session's input reaches the command and its output comes back
line by line, as the task's user on the task's host; the command's exit code is the CLI's; a
terminal session has a pty whose Ctrl-C reaches the foreground command; cancelling the task
ends the session. Every refusal happens at the WebSocket handshake, before anything runs: a
member of another tenant is told the job does not exist, a viewer is refused, a bad or missing
token is unauthenticated, a task that is not running is said to be so.

Every read is bounded (exec_sessions.py): a session that never answers fails the test instead
of hanging it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from aipaas.backends import task_session
from tests.integration.exec_sessions import READ_SECONDS, session
from tests.integration.task_images import IMAGE, build_image, unavailable_reason
from tests.integration.test_task_exec import USERS, World, sleeper
from tests.support.server_process import AIPAAS, SETUP, ServerProcess

QUEUE_OF_GLOBEX = """apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: globex}
"""


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
    with session(world.server, "-i", "job/shared", "--", "sh", token=world.tokens["mia"]) as shell:
        shell.send("hostname\n")
        assert shell.line_matching(".+").group(0) == socket.gethostname()
        shell.send("id -u\n")
        assert shell.line_matching(".+").group(0) == uid
        shell.send("exit 3\n")
        code, _ = shell.end()
    assert code == 3


def test_end_of_input_ends_a_command_that_reads_it_all(world: World) -> None:
    with session(
        world.server, "-i", "job/shared", "--", "wc", "-l", token=world.tokens["mia"]
    ) as count:
        count.send("one\ntwo\n")
        assert count.process.stdin is not None
        count.process.stdin.close()  # the CLI sends end of input; wc then prints and ends
        assert count.line_matching(r"^\s*\d+\s*$").group(0).strip() == "2"
        assert count.end()[0] == 0


def test_a_terminal_session_has_a_pty_whose_ctrl_c_reaches_the_foreground_command(
    world: World,
) -> None:
    args = ("-i", "--tty", "job/shared", "--", "sh")
    with session(world.server, *args, token=world.tokens["mia"]) as shell:
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
    with session(world.server, "-i", "job/doomed", "--", "sh", token=world.tokens["mia"]) as shell:
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
    with session(world.server, *args, token=world.tokens["gus"]) as refused:
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


def open_socket(
    world: World, job: str, token: str, command: list[str], **query: str
) -> ClientConnection:
    """A session opened by a WebSocket client of the test's own, to see the frames."""
    params = [("command", part) for part in command] + list(query.items())
    url = f"{world.server.url.replace('http://', 'ws://')}/api/v1/jobs/{job}/exec?"
    return connect(
        url + urlencode(params),
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=READ_SECONDS,
    )


def output_until(connection: ClientConnection, pattern: str) -> re.Match[str]:
    """The output received until it matches ``pattern``; each frame waited READ_SECONDS."""
    seen = b""
    while not (found := re.search(pattern, seen.decode(errors="replace"))):
        frame = connection.recv(timeout=READ_SECONDS)
        assert isinstance(frame, bytes), f"a text frame before the output: {frame}"
        seen += frame
    return found


def test_a_resize_frame_changes_the_sessions_terminal_size(world: World) -> None:
    with open_socket(
        world, "shared", world.tokens["mia"], ["sh"], tty="true", rows="30", cols="90"
    ) as connection:
        connection.send(b'echo "SIZE-$(stty size)"\n')
        output_until(connection, r"SIZE-30 90")
        connection.send(json.dumps({"type": "resize", "rows": 50, "cols": 120}))
        connection.send(b'echo "SIZE-$(stty size)"\n')
        output_until(connection, r"SIZE-50 120")
        connection.send(b"exit 4\n")
        while isinstance(last := connection.recv(timeout=READ_SECONDS), bytes):
            pass
        assert json.loads(last) == {"type": "exit", "code": 4}


def test_a_client_that_goes_away_ends_its_command(world: World) -> None:
    with open_socket(
        world, "shared", world.tokens["mia"], ["sh", "-c", "echo PID-$$; exec sleep 600"]
    ) as connection:
        pid = int(output_until(connection, r"PID-(\d+)").group(1))
        assert Path(f"/proc/{pid}").exists()
    deadline = time.monotonic() + READ_SECONDS
    while Path(f"/proc/{pid}").exists():  # SIGTERM to its group, SIGKILL 2 s later
        assert time.monotonic() < deadline, f"the command {pid} outlived its session"
        time.sleep(0.2)


def test_a_job_of_the_same_name_in_each_tenant_is_each_callers_own(world: World) -> None:
    twin = sleeper("shared").replace('"tenant": "acme"', '"tenant": "globex"')
    with world.server.http() as client:
        client.post("/apply", content=QUEUE_OF_GLOBEX).raise_for_status()
        client.post("/apply", content=twin).raise_for_status()
    deadline = time.monotonic() + 90
    while (world.server.job("shared", "globex").get("status") or {}).get("phase") != "Running":
        assert time.monotonic() < deadline, "globex's job never ran"
        time.sleep(0.2)
    acme_uid = task_uid(world, "shared")
    with open_socket(world, "shared", world.tokens["gus"], ["id", "-u"]) as connection:
        globex_uid = output_until(connection, r"(\d+)\s").group(1)
    assert globex_uid != acme_uid  # gus's session ran in globex's job, as globex's user
    with world.server.http() as client:
        client.post("/jobs/shared/cancel", params={"tenant": "globex"}).raise_for_status()


def test_a_member_naming_another_tenant_is_told_its_job_does_not_exist(world: World) -> None:
    query = {"tenant": "globex"}
    assert handshake_status(world, "shared", world.tokens["mia"], **query) == 404


def test_a_session_in_a_tasks_container_runs_inside_it(world: World) -> None:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    build_image()
    with world.server.http() as client:
        client.post("/apply", content=sleeper("boxed", IMAGE)).raise_for_status()
    world.running("boxed")
    deadline = time.monotonic() + READ_SECONDS
    while True:  # Running as soon as podman starts; the container a moment later
        done = world.server.cli("exec", "job/boxed", "--", "true", check=False)
        if done.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for tty in ((), ("--tty",)):
        args = ("-i", *tty, "job/boxed", "--", "sh")
        with session(world.server, *args, token=world.tokens["mia"]) as shell:
            shell.send('echo "IN-$(ls /bin/busybox)-$(id -u)"\n')
            found = shell.line_matching(r"IN-(\S+)-(\d+)")
            assert found.group(1) == "/bin/busybox" and found.group(2) != "0", found.group(0)
            shell.send("exit 6\n")
            assert shell.end()[0] == 6


def test_the_cli_on_a_terminal_passes_its_size_and_changes_and_keys_through_raw(
    world: World,
) -> None:
    """The CLI itself on a terminal (as a person runs it): the task's pty starts at the CLI's
    window size and follows it (SIGWINCH); in raw mode Ctrl-C reaches the task, not the CLI."""
    env = {
        **os.environ,
        "AIPAAS_URL": world.server.url,
        "AIPAAS_TOKEN": world.tokens["mia"],
        "AIPAAS_CONFIG": str(world.server.data_dir / "no-config.yaml"),
    }
    argv = [AIPAAS, "exec", "-i", "--tty", "job/shared", "--", "sh"]
    cli = task_session.spawn(argv, env, tty=True, rows=33, cols=101)
    seen = bytearray()

    def until(pattern: str, since: int = 0) -> re.Match[str]:
        deadline = time.monotonic() + READ_SECONDS
        while not (found := re.search(pattern, seen[since:].decode(errors="replace"))):
            assert time.monotonic() < deadline, f"no {pattern!r} in {bytes(seen)!r}"
            chunk = cli.read(timeout=READ_SECONDS)
            assert chunk, f"the CLI ended before {pattern!r}: {bytes(seen)!r}"
            seen.extend(chunk)
        return found

    def size() -> str:
        since = len(seen)
        cli.write(b'echo "SIZE-$(stty size)"\n')
        return until(r"SIZE-(\d+ \d+)\r", since).group(1)

    try:  # the size before anything is typed: what was typed ahead reaches the task too
        cli.write(b'echo "SIZE-$(stty size)"\n')
        until(r"SIZE-33 101")
        cli.resize(44, 111)  # the kernel sends the CLI SIGWINCH; it sends a resize frame
        deadline = time.monotonic() + READ_SECONDS
        # the frame comes from the CLI's signal handler, the line typed next from its input:
        # either may reach the task first
        while (now := size()) != "44 111":
            assert time.monotonic() < deadline, f"the size stayed {now}"
            time.sleep(0.5)
        cli.write(b"sleep 300\n")
        time.sleep(1)
        cli.write(b"\x03")  # raw mode: a byte for the task's terminal, no SIGINT for the CLI
        cli.write(b'echo "AFTER-$?"\n')
        until(r"AFTER-130")
        cli.write(b"exit 8\n")
        while cli.read(timeout=READ_SECONDS):  # until the CLI ends
            pass
    finally:
        cli.kill()
    assert cli.wait() == 8
    cli.close()
