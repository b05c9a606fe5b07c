"""The client side of ``aipaas exec -i [--tty] job/NAME -- CMD``: a WebSocket to the API
(server/exec_session.py, whose docstring gives the frames) that carries this process's
standard input to the command and the command's output back as it is written; the command's
exit code is this process's.

Who calls it: cli/exec.py. With ``--tty`` the local terminal is put in raw mode (every key,
Ctrl-C too, goes to the command, whose terminal interprets it) and restored at the end, and
its window size is sent at the start and on every change (SIGWINCH).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import termios
import threading
import tty as terminal
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any
from urllib.parse import quote, urlencode

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from aipaas.client import Client
from aipaas.errors import AipaasError, FieldError, InvalidObject, Unavailable, error_class

#: seconds the handshake may take (the server starts the command before it answers)
OPEN_TIMEOUT_SECONDS = 60.0
CHUNK_BYTES = 65536
STDIN, STDOUT = 0, 1


def run_session(
    client: Client,
    job: str,
    command: Sequence[str],
    *,
    task: str | None,
    tenant: str | None,
    tty: bool,
) -> int:
    """The command's exit code once it has ended.

    Raises:
        AipaasError: the handshake was refused (the server's error), or no server answered.
    """
    rows, cols = _window_size() if tty else (24, 80)
    query: list[tuple[str, str]] = [("command", part) for part in command]
    query += [("task", task)] if task else []
    query += [("tenant", tenant)] if tenant else []
    query += [("tty", "true"), ("rows", str(rows)), ("cols", str(cols))] if tty else []
    base = client.url.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    url = f"{base}/api/v1/jobs/{quote(job, safe='')}/exec?{urlencode(query)}"
    connection = _connect(client, url)
    with connection, _raw_terminal(tty):
        if tty:
            _send_resizes(connection)
        threading.Thread(target=_send_input, args=(connection,), daemon=True).start()
        return _receive(connection)


def _connect(client: Client, url: str) -> ClientConnection:
    header = client.http.headers.get("authorization")
    try:
        return connect(
            url,
            additional_headers={"Authorization": header} if header else None,
            open_timeout=OPEN_TIMEOUT_SECONDS,
            max_size=None,  # output frames are the server's reads: at most 64 KiB each
            compression=None,
        )
    except InvalidStatus as err:
        raise _refusal(client, err.response.status_code, bytes(err.response.body or b"")) from err
    except (OSError, InvalidHandshake, TimeoutError) as err:
        raise Unavailable(f"cannot reach {client.url}: {err}") from err


def _refusal(client: Client, status: int, body: bytes) -> AipaasError:
    """The server's error, as the HTTP client makes it of an error answer."""
    try:
        found: dict[str, Any] = json.loads(body)
    except ValueError:
        return AipaasError(f"HTTP {status}: {body[:200]!r}")
    code = str(found.get("code", ""))
    message = str(found.get("message") or f"HTTP {status}")
    if status == 401 and client.token_note:
        message = client.token_note
    if code == "Invalid":
        fields = [FieldError(f.get("path", ""), f.get("reason", "")) for f in found["fields"]]
        return InvalidObject(fields, message)
    return error_class(code)(message)


def _receive(connection: ClientConnection) -> int:
    """Output to standard output until the exit frame; its code."""
    try:
        for message in connection:
            if isinstance(message, bytes):
                _write_all(message)
                continue
            frame = json.loads(message)
            if frame.get("type") == "exit":
                if frame.get("reason"):
                    print(f"\r\naipaas: {frame['reason']}", file=sys.stderr)
                return int(frame.get("code", 1))
    except ConnectionClosed:
        pass
    print("\r\naipaas: the session ended without the command's exit code", file=sys.stderr)
    return 1


def _send_input(connection: ClientConnection) -> None:
    """Standard input to the command, then end of input (a thread: reads block)."""
    with contextlib.suppress(ConnectionClosed, OSError):
        while chunk := os.read(STDIN, CHUNK_BYTES):
            connection.send(chunk)
        connection.send(json.dumps({"type": "eof"}))


def _send_resizes(connection: ClientConnection) -> None:
    def send(frame: str) -> None:
        with contextlib.suppress(ConnectionClosed):
            connection.send(frame)

    def resized(_signum: int, _frame: FrameType | None) -> None:
        rows, cols = _window_size()
        frame = json.dumps({"type": "resize", "rows": rows, "cols": cols})
        # sent from a thread: the handler interrupts the main thread, which may be inside the
        # connection's receive and hold its locks
        threading.Thread(target=send, args=(frame,), daemon=True).start()

    signal.signal(signal.SIGWINCH, resized)


def _window_size() -> tuple[int, int]:
    try:
        size = os.get_terminal_size(STDOUT)
    except OSError:
        return 24, 80
    return size.lines, size.columns


@contextlib.contextmanager
def _raw_terminal(tty: bool) -> Iterator[None]:
    """With ``tty`` and a terminal as input: raw mode, restored however the session ends."""
    if not tty or not os.isatty(STDIN):
        yield
        return
    saved = termios.tcgetattr(STDIN)
    terminal.setraw(STDIN, termios.TCSADRAIN)  # not TCSAFLUSH: what was typed ahead is kept
    try:
        yield
    finally:
        termios.tcsetattr(STDIN, termios.TCSADRAIN, saved)


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(STDOUT, view) :]
