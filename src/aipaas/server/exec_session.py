"""An interactive session in a running task: a WebSocket at ``/api/v1/jobs/{name}/exec``
(the path of ``POST .../exec``; a WebSocket handshake is a GET), as Kubernetes serves
pods/exec.

Who calls it: ``aipaas exec -i [--tty] job/NAME -- CMD`` (cli/exec_session.py).

The handshake carries the caller's ``Authorization: Bearer`` header, authenticated as every
route is (auth.principal_of), and the query: ``command`` (once per argument, at least one),
``task`` (none: the job's first running task), ``tty`` (``true``: a terminal), ``rows`` and
``cols`` (its first size), ``tenant`` (admins). It is refused before anything runs, with the
HTTP status and error body ``POST .../exec`` gives (exec_routes.task_to_enter: 404 for another
tenant's job, 403 for a role that may not write jobs, 409 for a task not running, 503 when
this server's backend cannot; 401 for a bad token; 422 for a bad query).

Frames once accepted:

- binary, client to server: input for the command; server to client: its output as it is
  written (standard output and errors together; one stream with a terminal anyway).
- text, JSON, client to server: ``{"type": "resize", "rows": R, "cols": C}``, and
  ``{"type": "eof"}`` (end of input: the pipe is closed; a terminal reads its end-of-input
  byte, Ctrl-D).
- text, JSON, server to client, last: ``{"type": "exit", "code": N}``, with ``"reason"`` when
  the task stopped running (the server then killed the command, and N is 137, or the backend
  ended it with the task); then the server closes.

The command runs where the task runs, as ``POST .../exec`` runs one, through the function the
composition root gives ``create_app`` (``task_session``; cli/control_runtime.py), since the
API never imports a backend. The session ends when the command ends, when the client goes
(the command is killed), or when the task stops running (the command is killed; the task's
record is read every ``WATCH_SECONDS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from fastapi import APIRouter, WebSocket
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.websockets import WebSocketDisconnect

from aipaas.api.errors import invalid
from aipaas.api.job import TaskPhase
from aipaas.errors import AipaasError, Conflict, Unavailable
from aipaas.server.auth import principal_of
from aipaas.server.exec_routes import task_to_enter
from aipaas.server.http_errors import error_body
from aipaas.store import Store, TaskRecord, TaskRepository

log = logging.getLogger(__name__)

#: how often a session reads whether its task still runs
WATCH_SECONDS: Final = 1.0
#: sessions one API process relays at once (each holds two threads and a process)
MAX_SESSIONS: Final = 64
#: input frames a session holds for a command that has not read them yet (each at most
#: uvicorn's ws_max_size, 16 MiB by default)
INPUT_FRAMES: Final = 16
INPUT_WAIT_SECONDS: Final = 0.05
#: how often a writer with nothing to write looks whether its session has ended
INPUT_POLL_SECONDS: Final = 0.5
#: how long a session's end waits for its writer (the command's SIGKILL comes after 2 s)
WRITER_JOIN_SECONDS: Final = 5.0
#: the exit code said when the server ended the session (as a shell says SIGKILL)
ENDED_CODE: Final = 137
#: how long a command ended by a signal waits for its task's record to say whether the task
#: was stopped: Slurm's scancel ends a job's steps (srun exits 143) before the controller's
#: cycle writes the stop, and the client is owed the reason
STOP_SEEN_SECONDS: Final = 6.0
#: the writer's mark for end of input (an empty binary frame is skipped, never its end)
_EOF: Final = b""
UNAVAILABLE: Final = (
    "this server's backend cannot open sessions in tasks (aipaas exec -i): the local and "
    "Slurm backends can; Kubernetes, Ray and simulated nodes cannot"
)


class Session(Protocol):
    """What a backend gives for a session (backends/task_session.py's ``ProcessSession``)."""

    def read(self) -> bytes: ...
    def write(self, data: bytes) -> None: ...
    def close_input(self) -> None: ...
    def resize(self, rows: int, cols: int) -> None: ...
    def wait(self) -> int: ...
    def kill(self) -> None: ...
    def close(self) -> None: ...


#: (request id, command, tty, rows, cols) -> the session; None: the task does not run on this
#: process's backend. May raise OSError (the command cannot start).
SessionOpener = Callable[[str, Sequence[str], bool, int, int], Session | None]

router = APIRouter(tags=["exec"])  # under routes.router's /api/v1
_open_sessions = threading.BoundedSemaphore(MAX_SESSIONS)


class SessionQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(min_length=1, max_length=1024)
    task: str | None = Field(default=None, max_length=80)
    tty: bool = False
    rows: int = Field(default=24, ge=1, le=1000)
    cols: int = Field(default=80, ge=1, le=1000)
    tenant: str | None = Field(default=None, max_length=63)


class Resize(BaseModel):
    type: str
    rows: int = Field(ge=1, le=1000)
    cols: int = Field(ge=1, le=1000)


@router.websocket("/jobs/{name}/exec")
async def exec_session(websocket: WebSocket, name: str) -> None:
    """Refuse at the handshake, or accept and relay until the session ends."""
    if not _open_sessions.acquire(blocking=False):
        await _refuse(websocket, Unavailable(f"this server relays {MAX_SESSIONS} sessions"))
        return
    try:
        try:
            session, record = await run_in_threadpool(_open, websocket, name)
        except AipaasError as err:
            await _refuse(websocket, err)
            return
        try:
            await websocket.accept()
            await _relay(websocket, session, record)
        finally:
            session.kill()
            await run_in_threadpool(session.wait)
            session.close()
    finally:
        _open_sessions.release()


def _query(websocket: WebSocket) -> SessionQuery:
    found: dict[str, Any] = {"command": []}
    for key, value in websocket.query_params.multi_items():
        if key == "command":
            found["command"].append(value)
        else:
            found[key] = value
    try:
        return SessionQuery.model_validate(found)
    except ValidationError as err:
        raise invalid(err) from err


def _open(websocket: WebSocket, name: str) -> tuple[Session, TaskRecord]:
    """Authenticate, read the query, check as ``POST .../exec`` does, and start the command
    (the caller first: an unauthenticated one learns nothing of what a query may be)."""
    caller = principal_of(websocket)
    query = _query(websocket)
    opener: SessionOpener | None = getattr(websocket.app.state, "task_session", None)
    record = task_to_enter(
        websocket,
        caller,
        name,
        query.tenant,
        query.task,
        unavailable=None if opener is not None else UNAVAILABLE,
    )
    assert opener is not None and record.request_id is not None
    try:
        session = opener(record.request_id, query.command, query.tty, query.rows, query.cols)
    except OSError as err:
        raise Conflict(f"cannot start {query.command[0]!r} in task {record.name}: {err}") from err
    if session is None:
        raise Conflict(f"task {record.name} is not running on this server's backend any more")
    log.info(
        "exec session opened: user=%s tenant=%s job=%s task=%s tty=%s",
        caller.user,
        caller.tenant,
        name,
        record.name,
        query.tty,
    )
    return session, record


async def _refuse(websocket: WebSocket, err: AipaasError) -> None:
    headers = {"WWW-Authenticate": "Bearer"} if err.http_status == 401 else None
    response = JSONResponse(error_body(err), status_code=err.http_status, headers=headers)
    await websocket.send_denial_response(response)


async def _relay(websocket: WebSocket, session: Session, record: TaskRecord) -> None:
    """Output to the client, the client's input to the command, until one of: the command
    ended (its exit frame sent), the client went, the task stopped running."""
    loop = asyncio.get_running_loop()
    output: asyncio.Queue[bytes | int] = asyncio.Queue(maxsize=64)
    # bounded: a client that sends faster than the command reads waits (and TCP tells it)
    inputs: queue.Queue[bytes] = queue.Queue(maxsize=INPUT_FRAMES)
    done = threading.Event()  # the writer's end
    ended: list[str] = []  # why the server ended it, when it did

    def read_all() -> None:  # a thread: reads block
        while chunk := session.read():
            asyncio.run_coroutine_threadsafe(output.put(chunk), loop).result()
        code = session.wait()
        asyncio.run_coroutine_threadsafe(output.put(code), loop).result()

    def write_all() -> None:  # a thread: a command that reads nothing blocks its writer
        while not done.is_set():
            try:
                data = inputs.get(timeout=INPUT_POLL_SECONDS)
            except queue.Empty:
                continue
            if data == _EOF:
                session.close_input()
            else:
                session.write(data)  # fails at once once the command is gone

    async def send() -> None:
        while isinstance(item := await output.get(), bytes):
            await websocket.send_bytes(item)
        code = ENDED_CODE if ended else item
        frame: dict[str, Any] = {"type": "exit", "code": code}
        if not ended:  # the backend may have ended it with the task (Slurm's scancel does)
            patience = STOP_SEEN_SECONDS if isinstance(code, int) and code > 128 else 0.0
            why = await _stopped_within(websocket.app.state.store, record, patience)
            if why is not None:
                frame["reason"] = why
        else:
            frame["reason"] = ended[0]
        await websocket.send_text(json.dumps(frame))
        await websocket.close()

    async def receive() -> None:
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("bytes"):
                    await put(message["bytes"])
                elif message.get("text") is not None and _control(session, message["text"]):
                    await put(_EOF)  # through the writer, after the input sent before it

    async def put(data: bytes) -> None:
        while inputs.full():
            await asyncio.sleep(INPUT_WAIT_SECONDS)
        inputs.put_nowait(data)

    async def watch() -> None:
        store: Store = websocket.app.state.store
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            why = await run_in_threadpool(_stopped, store, record)
            if why is not None:
                ended.append(why)
                session.kill()  # the reader then sees the end, and send says it
                return

    reader = threading.Thread(target=read_all, name="exec-session-read", daemon=True)
    writer = threading.Thread(target=write_all, name="exec-session-write", daemon=True)
    reader.start()
    writer.start()
    sending = asyncio.create_task(send())
    receiving = asyncio.create_task(receive())
    watching = asyncio.create_task(watch())
    try:
        await asyncio.wait({sending, receiving}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        session.kill()
        done.set()
        for task in (receiving, watching):
            task.cancel()
        if not sending.done():  # the client went: drain the reader so that it can end
            sending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sending
            while reader.is_alive():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(output.get(), timeout=WATCH_SECONDS)
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
            await sending
        # the writer's last write fails once the command is gone (SIGKILL at the latest
        # KILL_GRACE_SECONDS after the kill): only then may the caller close its descriptors
        await run_in_threadpool(writer.join, WRITER_JOIN_SECONDS)


async def _stopped_within(store: Store, record: TaskRecord, seconds: float) -> str | None:
    """``_stopped``, read again every ``WATCH_SECONDS / 4`` for up to ``seconds`` while the
    task still looks to run."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (why := await run_in_threadpool(_stopped, store, record)) is None:
        if loop.time() >= deadline:
            return None
        await asyncio.sleep(WATCH_SECONDS / 4)
    return why


def _stopped(store: Store, record: TaskRecord) -> str | None:
    """Why the session's task no longer runs (the attempt the session entered), or None."""
    now = {r.name: r for r in TaskRepository(store).for_job(record.job_uid)}.get(record.name)
    if now is None:
        return f"task {record.name} is gone: session ended"
    if now.request_id != record.request_id:
        return f"task {record.name} was restarted: session ended"
    if now.stopping or now.phase != TaskPhase.RUNNING.value:
        return f"task {record.name} stopped running ({now.phase}): session ended"
    return None


def _control(session: Session, text: str) -> bool:
    """Carry out a control frame; True for end of input, which the caller queues. A frame this
    server does not know is ignored (a newer client's)."""
    try:
        frame = json.loads(text)
    except ValueError:
        return False
    if not isinstance(frame, dict):
        return False
    if frame.get("type") == "resize":
        with contextlib.suppress(ValidationError):
            size = Resize.model_validate(frame)
            session.resize(size.rows, size.cols)
    return frame.get("type") == "eof"
