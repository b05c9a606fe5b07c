"""The launch's environment rules: ``$(VAR)`` expansion as Kubernetes does it, MASTER_PORT
outside the service replicas' ports and moved to a free one per job, and the check that a
task's user can run its program."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from aipaas.backends.base import MASTER_PORTS
from aipaas.backends.expansion import expand
from aipaas.backends.local.task_env import master_port, program_problem
from aipaas.controller.launch import master_port as proposed_port
from aipaas.controller.services_replicas import PORTS as SERVICE_PORTS


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("$(RANK)", "3"),
        ("--rank=$(RANK)/$(WORLD_SIZE)", "--rank=3/8"),
        ("$$(RANK)", "$(RANK)"),
        ("$$$(RANK)", "$3"),
        ("$(NOPE)", "$(NOPE)"),
        ("$(RANK", "$(RANK"),
        ("$RANK and ${RANK}", "$RANK and ${RANK}"),
        ("cost: 5$", "cost: 5$"),
        ("$$", "$"),
    ],
)
def test_command_expansion_follows_kubernetes(text: str, want: str) -> None:
    assert expand(text, {"RANK": "3", "WORLD_SIZE": "8"}) == want


def test_master_ports_never_meet_service_replica_ports() -> None:
    assert not set(MASTER_PORTS) & set(SERVICE_PORTS)
    assert all(proposed_port(f"uid-{n}") in MASTER_PORTS for n in range(200))


def test_a_taken_port_moves_to_the_next_free_one_and_the_job_keeps_it(tmp_path: Path) -> None:
    taken = next(p for p in MASTER_PORTS if _bindable(p))
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", taken))
        holder.listen()
        chosen = master_port(tmp_path, "job-a", taken)
        assert chosen != taken and chosen in MASTER_PORTS
    # Asked again (a rank restarted later, the port now in use by rank 0): the same port.
    assert master_port(tmp_path, "job-a", taken) == chosen


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user may enter (pytest's own lies under a private one as root)."""
    path = Path(tempfile.mkdtemp(prefix="aipaas-task-env-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_a_program_under_a_private_directory_is_named_with_the_user(open_dir: Path) -> None:
    private = open_dir / "home"
    program = private / "bin" / "tool"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\necho hi\n")
    program.chmod(0o755)
    private.chmod(0o700)
    problem = program_problem(str(program), "/usr/bin:/bin", 65534, 65534, "/")
    assert problem is not None and str(program) in problem and "uid 65534" in problem
    assert f"cannot enter {private}" in problem


def test_a_script_its_user_cannot_read_is_refused(open_dir: Path) -> None:
    script = open_dir / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o711)  # others may execute but not read: a script cannot run so
    problem = program_problem(str(script), "/usr/bin:/bin", 65534, 65534, "/")
    assert problem is not None and "cannot read it" in problem


def test_a_program_on_path_and_a_missing_one(tmp_path: Path) -> None:
    assert program_problem("sh", "/usr/bin:/bin", 65534, 65534, "/") is None
    missing = program_problem("no-such-tool", "/usr/bin:/bin", 65534, 65534, "/")
    assert missing is not None and "no such program on the task's PATH" in missing
    assert program_problem("sh", "/usr/bin:/bin", os.geteuid(), os.getegid(), "/") is None
