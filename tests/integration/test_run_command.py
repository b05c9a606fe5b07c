"""`aipaas run` through a real root server (local backend): the code of a folder only root can
read runs as the tenant's unprivileged user, from the uploaded workdir; ``--dry-run`` prints
the manifest and submits nothing; unsafe archives are refused at upload naming the member."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.server_process import ServerProcess

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="tasks run as the tenant's own user only under a root server"
)

TRAIN = """
import os
import helper
print("trained on", open("data/input.txt").read().strip(), "as", os.environ["USER"])
print("workdir", os.environ["AIPAAS_WORKDIR"], "cwd", os.getcwd())
"""


@pytest.fixture
def private_folder() -> Iterator[Path]:
    """A project folder as a user has it in their home: only its owner (root) can read it."""
    folder = Path(tempfile.mkdtemp(prefix="aipaas-project-"))
    (folder / "train.py").write_text(TRAIN)
    (folder / "helper.py").write_text("VALUE = 1\n")
    (folder / "data").mkdir()
    (folder / "data" / "input.txt").write_text("the-folders-data\n")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    folder.chmod(0o700)
    yield folder
    shutil.rmtree(folder)


def test_run_with_a_workdir_runs_the_folders_code_as_the_tenants_user(
    tenant_server: ServerProcess, private_folder: Path
) -> None:
    done = tenant_server.cli(
        "run",
        "--workdir",
        str(private_folder),
        "--name",
        "train",
        "--queue",
        "research",
        "--cpu",
        "100m",
        "--memory",
        "64Mi",
        "-t",
        "acme",
        "--",
        "python3",
        "train.py",
    )
    assert "job/train submitted" in done.stdout
    tenant_server.wait_phase("train", "Succeeded", timeout=90)
    log = tenant_server.cli("logs", "job/train", "-t", "acme").stdout
    assert "trained on the-folders-data as aipaas-t-acme" in log, log
    words = log.split("workdir", 1)[1].split()
    assert words[0] == words[2]  # it ran in its working directory
    assert not Path(words[0], ".git").exists()  # a repository's history stays home


def test_a_program_that_comes_with_the_workdir_runs(
    tenant_server: ServerProcess, private_folder: Path
) -> None:
    script = private_folder / "run.sh"
    script.write_text("#!/bin/sh\necho started by run.sh from $(pwd)\n")
    script.chmod(0o755)
    tenant_server.cli(
        "run",
        "--workdir",
        str(private_folder),
        "--name",
        "script",
        "--queue",
        "research",
        "--cpu",
        "100m",
        "--memory",
        "64Mi",
        "-t",
        "acme",
        "--",
        "./run.sh",
    )
    tenant_server.wait_phase("script", "Succeeded", timeout=90)
    assert (
        "started by run.sh from /" in tenant_server.cli("logs", "job/script", "-t", "acme").stdout
    )


def test_dry_run_prints_the_manifest_and_submits_nothing(
    tenant_server: ServerProcess, private_folder: Path
) -> None:
    printed = tenant_server.cli(
        "run",
        "--dry-run",
        "-o",
        "yaml",
        "--name",
        "dry",
        "--gpus",
        "2",
        "--nodes",
        "3",
        "--workdir",
        str(private_folder),
        "--",
        "python3",
        "train.py",
        "--lr",
        "0.1",
    ).stdout
    manifest = yaml.safe_load(printed)
    assert manifest["kind"] == "Job" and manifest["metadata"]["name"] == "dry"
    task = manifest["spec"]["tasks"][0]
    assert task["command"] == ["python3", "train.py", "--lr", "0.1"]
    assert task["replicas"] == 3 and task["resources"]["gpu"] == 2
    assert manifest["spec"]["workdir"].startswith("sha256-")
    with tenant_server.http() as client:
        assert client.get("/jobs/dry", params={"tenant": "acme"}).status_code == 404


def archive(*members: tuple[str, str, str]) -> bytes:
    """A tar.gz of (name, kind, link target or content) members."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, kind, value in members:
            info = tarfile.TarInfo(name)
            if kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, value
                tar.addfile(info)
            else:
                info.size = len(value)
                tar.addfile(info, io.BytesIO(value.encode()))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (archive(("../evil.py", "file", "x")), "'../evil.py': has a '..' component"),
        (archive(("/etc/cron.d/x", "file", "x")), "'/etc/cron.d/x': is an absolute path"),
        (archive(("out", "link", "../../etc")), "'out': links to ../../etc, outside the workdir"),
        (archive(("abs", "link", "/etc/passwd")), "'abs': links to /etc/passwd"),
        (
            archive(("d", "link", "sub"), ("d/x.py", "file", "x")),
            "'d/x.py': is written through the link d",
        ),
        (b"not a tar at all", "not a gzip-compressed tar archive"),
    ],
    # Named, not by their bytes: a gzip header holds the time it was made, which differs
    # between the test processes that collect the cases.
    ids=["dot-dot", "absolute", "link-out", "link-absolute", "through-link", "not-a-tar"],
)
def test_an_unsafe_workdir_is_refused_naming_the_member(
    tenant_server: ServerProcess, body: bytes, said: str
) -> None:
    with tenant_server.http() as client:
        answer = client.post("/workdirs", params={"tenant": "acme"}, content=body)
    assert answer.status_code == 422, answer.text
    assert said in answer.json()["message"], answer.text


def test_a_job_naming_a_workdir_never_uploaded_fails_saying_so(
    tenant_server: ServerProcess,
) -> None:
    missing = "sha256-" + "0" * 64
    manifest = (
        "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: nocode, tenant: acme}\n"
        f"spec:\n  queue: research\n  workdir: {missing}\n  tasks:\n"
        "    - {name: worker, command: [python3, train.py], resources: {cpu: 100m}}\n"
    )
    with tenant_server.http() as client:
        client.post("/apply", content=manifest).raise_for_status()
    status = tenant_server.wait_phase("nocode", "Failed")["status"]
    assert f"spec.workdir: {missing} was not uploaded" in status["tasks"][0]["message"]
