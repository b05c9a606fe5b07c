"""The request body limit, for every route, before authentication and before any parsing.

Who calls it: app.py's ``_Application.__call__`` wraps the whole application in it (outside
Starlette's own middleware, so that nothing below can turn the refusal into a 500 or a 400).

A body declared larger than the limit (Content-Length) is refused before a byte of it is read;
a body without a length (chunked) is counted as it arrives and refused at the first byte over the
limit. Either way the answer is a 413 in the shape of every error, with ``Connection: close`` so
that the server stops reading the rest. Before this, ``POST /api/v1/tokens`` read 200 MB without a
token: FastAPI reads a JSON body before the dependencies that authenticate.
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aipaas.errors import PayloadTooLarge
from aipaas.server.http_errors import error_body

_CLOSE = (b"connection", b"close")


class _TooLarge(PayloadTooLarge):
    """Raised out of ``receive`` to stop whatever is reading the body (an AipaasError, so that
    the handlers below answer it quietly rather than log it as a fault; that answer is dropped)."""


def declared_length(scope: Scope) -> int | None:
    """The Content-Length header as a number; None when absent or not a number (the HTTP
    server refuses a malformed one itself)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def _streamed(scope: Scope) -> bool:
    return any(name == b"transfer-encoding" for name, _value in scope["headers"])


async def limit_body(app: ASGIApp, limit: int, scope: Scope, receive: Receive, send: Send) -> None:
    """Run ``app`` for one HTTP request with its body limited to ``limit`` bytes."""
    declared = declared_length(scope)
    if declared is not None and declared > limit:
        await _refuse(send, f"request body is {declared} bytes; the limit is {limit}")
        return
    received = 0
    over = False
    started = False
    # Has the application read the whole body? A route that answers without reading it (a
    # GET, a 401) leaves the rest to the HTTP server, which would go on reading a stream of
    # any length to discard it: such an answer closes the connection instead.
    finished = not _streamed(scope) and not declared

    async def limited_receive() -> Message:
        nonlocal received, over, finished
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            finished = finished or not message.get("more_body", False)
            if received > limit:
                over = True
                raise _TooLarge(f"request body is over the limit of {limit} bytes")
        return message

    async def guarded_send(message: Message) -> None:
        nonlocal started
        if over:
            return  # whatever the application makes of the interruption, the 413 is the answer
        if message["type"] == "http.response.start":
            started = True
            if not finished:
                message = {**message, "headers": [*message.get("headers", []), _CLOSE]}
        await send(message)

    try:
        await app(scope, limited_receive, guarded_send)
    except Exception:
        if not over:
            raise
    if over and not started:
        await _refuse(send, f"request body is over the limit of {limit} bytes")


async def _refuse(send: Send, message: str) -> None:
    err = PayloadTooLarge(message)
    body = json.dumps(error_body(err)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": err.http_status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                _CLOSE,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def read_body(request: Request, limit: int) -> bytes:
    """A route's body, refused (413) past ``limit``: a route's own limit, below the server's
    (a token request or a usage correction is a few hundred bytes)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body is {declared} bytes; the limit is {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
