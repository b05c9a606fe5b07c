"""Every example block of README.md and docs/ is run, so the docs cannot drift from the code.

What counts as an example: a fenced block whose info string is a shell (``sh``, ``bash``,
``shell``, ``console``), ``python``/``py`` or ``yaml``/``yml``. Blocks without one (output
shown, diagrams) are not examples. Each page's blocks run in the page's order, in one session
of its own: `aipaas up` started as a new user starts it, in a scratch folder that links the
repository's ``.venv``, ``examples``, ``scripts`` and the rest, then, as the README says of every
example, ``aipaas apply -f examples/hello.yaml`` done and its job finished, with ``AIPAAS_URL``
and ``AIPAAS_TOKEN`` exported and ``.venv/bin`` on PATH. A page with no block to run starts no
server.

- shell: ``bash -e -o pipefail`` in the folder; whatever it left running in the background (an
  HTTP server a dataset reads) is ended with it.
- python: the venv's Python, same folder and environment.
- yaml: a complete object (``apiVersion`` and ``kind``) is validated as the server validates an
  applied document (``parse_object``; a ``SchedulerProfile`` as ``--policy FILE`` loads one);
  a fragment (a ``spec:`` to put in a Job, a profile's ``scores:``) must parse as YAML.

A block that cannot run here (it needs a Slurm or Kubernetes cluster, a GPU, the full trace,
or it starts a server in the foreground) carries a visible sentence in the paragraph just
before it: ``*Not run by the docs test: REASON.*`` This test honours it and reports the block as
skipped with that reason (``pytest -rs`` lists them), so what is not checked is said where the
reader sees it. The pages are read as they are when the test runs: new pages and blocks are
picked up without any change here.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from aipaas.api.parsing import load_documents
from aipaas.api.registry import parse_object
from aipaas.errors import AipaasError
from aipaas.scheduler.framework.profile import load_profile
from tests.integration.up_process import UpProcess

ROOT = Path(__file__).resolve().parents[2]
SHELLS = {"sh", "bash", "shell", "console"}
PYTHONS = {"python", "py"}
YAMLS = {"yaml", "yml"}
NOT_RUN = re.compile(r"\*Not run by the docs test: (.+?)\*", re.S)
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^`\n]*)$")
#: what the scratch folder links from the repository (a user's checkout, less its .aipaas)
LINKED = (".venv", "examples", "scripts", "deploy", "src", "tests", "benchmarks", "docs")
BLOCK_SECONDS = 240


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    not_run: str | None  # the reason a visible marker gives, if any

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    """The example blocks of one page, in order (see the module's docstring)."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent = opening.group("indent")
        language = (opening.group("info").split() or [""])[0].lower()
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = "\n".join(line.removeprefix(indent) for line in lines[index + 1 : end])
        if language in SHELLS | PYTHONS | YAMLS:
            found.append(
                Block(
                    _page_name(path),
                    index + 1,
                    language,
                    textwrap.dedent(body) + "\n",
                    _marker(lines, index),
                )
            )
        index = end + 1
    return found


def _page_name(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def _marker(lines: list[str], fence: int) -> str | None:
    """The reason of a ``*Not run by the docs test: ...*`` paragraph right before line
    ``fence`` (blank lines between allowed), or None."""
    at = fence - 1
    while at >= 0 and not lines[at].strip():
        at -= 1
    paragraph: list[str] = []
    while at >= 0 and lines[at].strip():
        paragraph.insert(0, lines[at].strip())
        at -= 1
    found = NOT_RUN.search(" ".join(paragraph))
    return " ".join(found.group(1).split()) if found else None


ALL_BLOCKS = [block for page in pages() for block in blocks_of(page)]


def test_the_docs_have_example_blocks_and_every_marker_gives_a_reason() -> None:
    assert any(b.page == "README.md" and b.not_run is None for b in ALL_BLOCKS)
    for block in ALL_BLOCKS:
        assert block.not_run is None or len(block.not_run) > 10, block.id


@dataclass
class Session:
    """One page's server and environment."""

    page: str
    up: UpProcess
    env: dict[str, str]


class Sessions:
    """At most one page's `aipaas up` at a time: the next page's first block closes the last."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.current: Session | None = None

    def for_page(self, page: str) -> Session:
        if self.current is not None and self.current.page == page:
            return self.current
        self.close()
        folder = self.base / re.sub(r"[^A-Za-z0-9]+", "-", page)
        folder.mkdir(parents=True)
        for name in LINKED:
            (folder / name).symlink_to(ROOT / name)
        home = folder / "home"
        home.mkdir()
        up = UpProcess(folder).start()
        self.current = Session(page, up, {})  # closed by close() even if the set-up fails
        env = up.env(AIPAAS_URL=up.url, AIPAAS_TOKEN=up.token)
        env.update(
            PATH=f"{folder / '.venv' / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
            HOME=str(home),
            SHELL="/bin/bash",
        )
        env.pop("XDG_CONFIG_HOME", None)
        self.current.env = env
        ready = _run(
            [
                "bash",
                "-e",
                "-c",
                "aipaas apply -f examples/hello.yaml && "
                "aipaas wait job/hello -t acme --for=phase=Succeeded --timeout 120s",
            ],
            folder,
            env,
        )
        assert ready.returncode == 0, f"the README's set-up failed: {ready.stdout}"
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.up.close()
            self.current = None


@pytest.fixture(scope="module")
def sessions() -> Iterator[Sessions]:
    # Not pytest's tmp_path: tasks may run as other users (the server as root), who must be
    # able to reach the folder's examples; and the path is short (sockets live under it).
    base = Path(tempfile.mkdtemp(prefix="aipaas-docs-"))
    base.chmod(0o755)
    keeper = Sessions(base)
    try:
        yield keeper
    finally:
        keeper.close()


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[b.id for b in ALL_BLOCKS])
def test_example_block_runs(block: Block, sessions: Sessions) -> None:
    if block.not_run is not None:
        pytest.skip(f"{block.id}: marked not run: {block.not_run}")
    if block.language in YAMLS:
        _check_yaml(block)
        return
    session = sessions.for_page(block.page)
    if block.language in PYTHONS:
        command = [str(ROOT / ".venv" / "bin" / "python"), "-c", block.text]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", block.text]
    ran = _run(command, session.up.folder, session.env)
    assert ran.returncode == 0, (
        f"{block.id} ({block.language}) failed with {ran.returncode}:\n{block.text}\n"
        f"--- its output:\n{ran.stdout[-4000:]}"
    )


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run in a session of its own, until the command itself ends; whatever it left running
    (a background server) is ended with it. The output goes to a file: a pipe would stay open
    as long as anything it started lives."""
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            process.wait(timeout=BLOCK_SECONDS)
        except subprocess.TimeoutExpired:
            output.write(f"\n(no end after {BLOCK_SECONDS} s)\n")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        output.seek(0)
        return subprocess.CompletedProcess(command, process.returncode, output.read(), "")


def _check_yaml(block: Block) -> None:
    loose = [d for d in yaml.safe_load_all(block.text) if d is not None]
    assert loose, f"{block.id}: an empty YAML block"
    if not all(isinstance(d, dict) and "kind" in d for d in loose):
        return  # a fragment (it may show alternatives under one key): parsing it is the check
    documents = load_documents(block.text)  # a manifest: loaded as the server loads one
    for index, document in enumerate(documents):
        if document["kind"] == "SchedulerProfile":
            with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
                handle.write(block.text)
                handle.flush()
                load_profile(handle.name)
            continue
        try:
            parse_object(document, index=index)
        except AipaasError as err:
            pytest.fail(f"{block.id} document {index}: {err.message} {getattr(err, 'fields', '')}")


def test_the_marker_is_honoured_and_explained(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Run this:\n\n```sh\necho ran\n```\n\n*Not run by the docs test: it needs a GPU\n"
        "of its own.*\n\n```sh\nnvidia-smi\n```\n\n```\nplain output\n```\n"
    )
    found = blocks_of(page)
    assert [(b.text, b.not_run) for b in found] == [
        ("echo ran\n", None),
        ("nvidia-smi\n", "it needs a GPU of its own."),
    ]


if __name__ == "__main__":  # what would run: python -m tests.integration.test_docs_examples
    for each in ALL_BLOCKS:
        print(each.id, each.language, f"not run: {each.not_run}" if each.not_run else "")
    sys.exit(0)
