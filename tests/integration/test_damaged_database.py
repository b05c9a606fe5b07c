"""A SQLite database damaged in the middle stops the server's start with one line naming the
file and what to do, instead of a server that serves and is never ready."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

from tests.support.server_process import ADMIN, AIPAAS, SETUP, ServerProcess, free_port

PAGE = 4096
QUEUES = 300  # rows enough for the file to have pages in the middle to damage


def queues(count: int) -> str:
    return "".join(
        f"---\napiVersion: aipaas/v1\nkind: Queue\nmetadata: {{name: q{index}, tenant: acme}}\n"
        f"spec: {{weight: 1}}\n"
        for index in range(count)
    )


def test_a_database_damaged_in_the_middle_stops_the_start_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data, backend="sim").start()
    try:
        server.cli("apply", "-f", "-", input=SETUP + queues(QUEUES))
    finally:
        server.stop()  # a clean stop: the WAL is folded into the file
    database = data / "aipaas.db"
    size = database.stat().st_size
    pages = size // PAGE
    assert pages >= 20, f"only {pages} pages"
    # Garbage over pages in the middle; the header (page 1) and the schema stay whole.
    noise = random.Random(7)
    with database.open("r+b") as handle:
        for page in range(pages // 3, 2 * pages // 3):
            handle.seek(page * PAGE)
            handle.write(bytes(noise.getrandbits(8) for _ in range(PAGE)))
    command = [
        AIPAAS,
        "server",
        "--data-dir",
        str(data),
        "--port",
        str(free_port()),
        "--backend",
        "sim",
        "--log-level",
        "warning",
    ]
    env = {**os.environ, "AIPAAS_BOOTSTRAP_TOKEN": ADMIN}
    try:
        ended = subprocess.run(command, env=env, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired as err:
        raise AssertionError(f"the server started on a damaged database: {err.stderr!r}") from err
    assert ended.returncode != 0
    assert "Traceback" not in ended.stderr, ended.stderr
    said = ended.stderr.strip().splitlines()[-1]
    assert said.startswith(f"aipaas server: the database {database} is damaged ("), said
    assert "restore it from a backup" in said, said
