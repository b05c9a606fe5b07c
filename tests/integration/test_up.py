"""`aipaas up`: embedded defaults, a demo cluster of sim nodes plus this machine, URL and token
printed, and the CLI configured."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.support.server_process import AIPAAS, free_port


def test_up_prints_url_and_token_and_configures_the_cli(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "AIPAAS_CONFIG": str(tmp_path / "config.yaml")}
    env.pop("AIPAAS_BOOTSTRAP_TOKEN", None)
    process = subprocess.Popen(
        [AIPAAS, "up", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 120  # a loaded machine starts a server slowly
        while time.monotonic() < deadline and not any(x.startswith("token:") for x in lines):
            line = process.stdout.readline()
            assert line or process.poll() is None, "".join(lines)  # EOF: it exited
            lines.append(line)
        text = "".join(lines)
        url = re.search(r"aipaas is up at (http://\S+)", text)
        token = re.search(r"token: (aip_\S+)", text)
        assert url and token, text
        assert url.group(1) == f"http://127.0.0.1:{port}"
        assert (tmp_path / ".aipaas" / "admin-token").read_text().strip() == token.group(1)
        assert oct((tmp_path / ".aipaas" / "admin-token").stat().st_mode & 0o777) == "0o600"
        ready = False
        deadline = time.monotonic() + 120
        while not ready and time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                ready = httpx.get(url.group(1) + "/readyz", timeout=5).status_code == 200
            time.sleep(0 if ready else 0.2)
        assert ready, "aipaas up never became ready"
        nodes = subprocess.run(
            [AIPAAS, "get", "nodes", "-o", "json"],
            env=env,
            text=True,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        backends = {n["spec"]["backend"] for n in json.loads(nodes)}
        assert backends == {"local", "sim"}
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(60)
