"""Every code block of docs/elastic.md runs as written against `aipaas up` (a real server
process, local backend), in the page's order, after examples/hello.yaml as the page says:

- a ``yaml`` block is applied as a whole (the server checks what it names: queues, priority
  classes the tenant allows) and each Service in it must answer a request through the entry
  point, from zero replicas where it scales to zero;
- a ``bash`` block runs with ``bash -e -o pipefail`` in the repository, with ``AIPAAS_URL`` and
  ``AIPAAS_TOKEN`` exported and the project's ``.venv/bin`` first on PATH. The model server's
  block gets ``AIPAAS_MODEL_VENV``: the tests' own environment with its packages
  (tests/support/model_venv.py, made when absent: about 3 GB of PyTorch the first time);
  it alone is skipped when pip cannot install them, saying so.

The blocks are read when the test is collected: a new block is run without a change here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support import model_venv
from tests.support.server_process import ADMIN, ServerProcess

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "elastic.md"
FENCE = re.compile(r"^```(\w*)\s*$")
#: how long a service of the page may take to answer its first request (a cold start)
FIRST_ANSWER_SECONDS = 330


@dataclass(frozen=True)
class Block:
    line: int
    language: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.language}@{self.line}"


def blocks(page: Path) -> list[Block]:
    found: list[Block] = []
    language: str | None = None
    start, lines = 0, list[str]()
    for number, line in enumerate(page.read_text().splitlines(), 1):
        fence = FENCE.match(line)
        if language is None and fence is not None:
            language, start, lines = fence.group(1), number, []
        elif language is not None and line.startswith("```"):
            found.append(Block(start, language, "\n".join(lines) + "\n"))
            language = None
        elif language is not None:
            lines.append(line)
    return found


BLOCKS = blocks(PAGE)


def test_the_page_has_the_examples_it_promises() -> None:
    kinds = [b.language for b in BLOCKS]
    assert kinds.count("yaml") >= 2 and "bash" in kinds, kinds
    assert all(b.language in ("yaml", "bash") for b in BLOCKS), kinds


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("elastic") / "data", verb="up").start()
    try:
        with process.http() as client:
            hello = (ROOT / "examples" / "hello.yaml").read_text()
            client.post("/apply", content=hello).raise_for_status()
        yield process
    finally:
        process.close()


def services_in(text: str) -> list[dict[str, Any]]:
    return [
        d for d in yaml.safe_load_all(text) if isinstance(d, dict) and d.get("kind") == "Service"
    ]


def answers(server: ServerProcess, tenant: str, name: str) -> httpx.Response:
    """A first request through the entry point (it waits for a cold start)."""
    with httpx.Client(
        base_url=server.url,
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=FIRST_ANSWER_SECONDS,
    ) as client:
        return client.get(f"/services/{tenant}/{name}/")


def environment(server: ServerProcess, block: Block) -> dict[str, str]:
    env = {
        **os.environ,
        "AIPAAS_URL": server.url,
        "AIPAAS_TOKEN": ADMIN,
        "AIPAAS_CONFIG": str(server.data_dir / "no-config.yaml"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    if "AIPAAS_MODEL_VENV" in block.text:
        try:
            python = model_venv.ensure()
        except model_venv.Unavailable as err:
            pytest.skip(f"the model's packages could not be installed by pip: {err}")
        env["AIPAAS_MODEL_VENV"] = str(python.parent.parent)
    return env


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_the_block_runs_as_written(server: ServerProcess, block: Block) -> None:
    if block.language == "yaml":
        with server.http() as client:
            applied = client.post("/apply", content=block.text)
        assert applied.status_code in (200, 201), f"{block.id}: {applied.text}"
        for found in services_in(block.text):
            meta = found["metadata"]
            answer = answers(server, meta["tenant"], meta["name"])
            assert answer.status_code == 200, f"{block.id} {meta['name']}: {answer.text[:300]}"
        return
    ran = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block.text],
        cwd=ROOT,
        env=environment(server, block),
        capture_output=True,
        text=True,
        timeout=FIRST_ANSWER_SECONDS + 120,
        check=False,
    )
    assert ran.returncode == 0, f"{block.id}: {ran.stdout[-1500:]}\n{ran.stderr[-1500:]}"
    if "embeddings" in block.text:
        assert "384 dimensions" in ran.stdout, ran.stdout
    if "chat/completions" in block.text:  # the answer the page shows, then the stream's end
        lines = ran.stdout.strip().splitlines()
        page = PAGE.read_text().replace("\n", " ")
        assert lines[-1] == "data: [DONE]", ran.stdout
        assert any("to zero" in line and f"`{line}`" in page for line in lines), ran.stdout
