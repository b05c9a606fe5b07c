"""`aipaas up` as a new user runs it: in a folder of its own (its data in ./.aipaas), nothing
set up beforehand, its output kept in a file; the URL and token read from what it printed.

Used by test_first_hour.py and test_docs_examples.py. The CLI config `up` writes goes to
``<folder>/config.yaml`` (AIPAAS_CONFIG) so a test never touches the real user's; the port is
a free one (``--port``), the only option given.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.support.server_process import AIPAAS, end_tasks, free_port

__all__ = ["UpProcess"]


class UpProcess:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.config = folder / "config.yaml"
        self.output = folder / "up.out"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = ""
        self.process: subprocess.Popen[bytes] | None = None

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a user of this `up`: the config it wrote, no token variables."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIPAAS_")}
        return {**env, "AIPAAS_CONFIG": str(self.config), **extra}

    def start(self, timeout: float = 180) -> UpProcess:
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.output.open("ab") as out:
            self.process = subprocess.Popen(
                [AIPAAS, "up", "--port", str(self.port)],
                cwd=self.folder,
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"aipaas up exited: {self.text()[-2000:]}")
            found = re.search(r"^token: (aip_\S+|[^ (]\S*)", self.text(), re.M)
            ready = False
            if found:
                with contextlib.suppress(httpx.TransportError):
                    ready = httpx.get(self.url + "/readyz", timeout=5).status_code == 200
            if ready and found:
                self.token = found.group(1)
                return self
            time.sleep(0.2)
        self.close()
        raise RuntimeError(f"aipaas up not ready: {self.text()[-2000:]}")

    def text(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""

    def cli(
        self, *args: str, input: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The CLI as the user of this `up` runs it (its config), in its folder."""
        return subprocess.run(
            [AIPAAS, *args],
            cwd=self.folder,
            env=env or self.env(),
            capture_output=True,
            text=True,
            input=input,
            timeout=120,
            check=False,
        )

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # as Ctrl-C in its terminal
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        end_tasks((self.folder / ".aipaas" / "run").resolve())
