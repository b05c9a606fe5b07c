"""backends/task_session.py with real processes: input reaches the command and its output
comes back; end of input ends a command that reads it all; a terminal has the size asked and
follows a resize; a command that leaves a child holding its output still ends its session;
a kill ends a command that ignores SIGTERM. Every read is bounded."""

from __future__ import annotations

import contextlib
import os
import re
import signal

from aipaas.backends import task_session
from aipaas.backends.task_session import ProcessSession

READ_SECONDS = 20.0
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def read_until(session: ProcessSession, pattern: str) -> str:
    seen = b""
    while not re.search(pattern, seen.decode(errors="replace")):
        chunk = session.read(timeout=READ_SECONDS)
        assert chunk, f"ended before {pattern!r}: {seen!r}"
        seen += chunk
    return seen.decode(errors="replace")


def read_to_end(session: ProcessSession) -> bytes:
    seen = b""
    while chunk := session.read(timeout=READ_SECONDS):
        seen += chunk
    return seen


def test_input_reaches_a_pipe_session_and_end_of_input_ends_it() -> None:
    session = task_session.spawn(["sh", "-c", "cat; echo done"], ENV, tty=False)
    try:
        session.write(b"hello\n")
        read_until(session, "hello")
        session.close_input()
        assert b"done" in read_to_end(session)
        assert session.wait() == 0
    finally:
        session.close()


def test_a_terminal_session_has_the_size_asked_and_follows_a_resize() -> None:
    session = task_session.spawn(["sh"], ENV, tty=True, rows=31, cols=97)
    try:
        session.write(b'echo "SIZE-$(stty size)"\n')
        read_until(session, "SIZE-31 97")
        session.resize(41, 107)
        session.write(b'echo "SIZE-$(stty size)"\n')
        read_until(session, "SIZE-41 107")
        session.write(b"exit 9\n")
        read_to_end(session)
        assert session.wait() == 9
    finally:
        session.close()


def test_a_child_left_holding_the_output_does_not_keep_the_session_open() -> None:
    session = task_session.spawn(["sh", "-c", "sleep 300 & echo started"], ENV, tty=False)
    try:
        assert b"started" in read_to_end(session)  # ends though the sleep holds the pipe
        assert session.wait() == 0
    finally:
        with contextlib.suppress(ProcessLookupError):  # the sleep, left in the group
            os.killpg(session.child.pid, signal.SIGKILL)
        session.close()


def test_kill_ends_a_command_that_ignores_sigterm() -> None:
    script = "trap '' TERM; echo ready; while :; do sleep 1; done"
    session = task_session.spawn(["sh", "-c", script], ENV, tty=False)
    try:
        read_until(session, "ready")
        session.kill()  # SIGTERM, ignored; SIGKILL KILL_GRACE_SECONDS later
        read_to_end(session)
        assert session.wait() == 128 + 9
    finally:
        session.close()
