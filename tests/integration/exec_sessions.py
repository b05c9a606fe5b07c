"""`aipaas exec -i` as a test drives it: a CLI process whose input the test writes and whose
output it reads line by line, every read bounded (a line at most READ_SECONDS, the end at most
END_SECONDS), so that a session that never answers fails a test instead of hanging it. Used by
test_exec_session.py (local backend) and test_exec_session_slurm.py."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import subprocess
import threading
import time
from collections.abc import Iterator

from tests.support.server_process import AIPAAS, ServerProcess

READ_SECONDS = 30.0
END_SECONDS = 60.0


class Session:
    """`aipaas exec -i ...` as a process whose output is read line by line, each read bounded."""

    def __init__(self, server: ServerProcess, *args: str, token: str) -> None:
        env = {
            **os.environ,
            "AIPAAS_URL": server.url,
            "AIPAAS_TOKEN": token,
            "AIPAAS_CONFIG": str(server.data_dir / "no-config.yaml"),
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
def session(server: ServerProcess, *args: str, token: str) -> Iterator[Session]:
    """``aipaas exec ARGS`` as a Session, killed at the end if it is still running."""
    opened = Session(server, *args, token=token)
    try:
        yield opened
    finally:
        opened.close()
