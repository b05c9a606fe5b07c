"""`aipaas run`'s pieces: the manifest it builds and the archive it packs of a workdir."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from aipaas.api.job import Job
from aipaas.api.registry import parse_object
from aipaas.cli.run import build_manifest, pack


def test_the_manifest_is_a_valid_job_with_what_was_asked() -> None:
    manifest = build_manifest(
        "train",
        ["python3", "train.py", "--lr", "0.1"],
        queue="research",
        tenant="acme",
        replicas=2,
        gpus=1,
        cpu="2",
        memory="4Gi",
        env={"SEED": "7"},
        workdir="sha256-" + "b" * 64,
    )
    job = parse_object(manifest)
    assert isinstance(job, Job)
    (task,) = job.spec.tasks
    assert task.command == ["python3", "train.py", "--lr", "0.1"] and task.replicas == 2
    assert task.env == {"SEED": "7"} and task.resources.amounts().gpu_count == 1
    assert job.spec.workdir == "sha256-" + "b" * 64 and job.tenant == "acme"


def test_a_workdir_packs_to_the_same_bytes_without_its_history(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print(1)\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref\n")
    (tmp_path / "src" / "__pycache__").mkdir()
    (tmp_path / "src" / "__pycache__" / "train.pyc").write_bytes(b"\0")
    os.symlink("src/train.py", tmp_path / "latest.py")
    first = pack(tmp_path)
    assert pack(tmp_path) == first  # the same folder, the same digest: stored once
    with tarfile.open(fileobj=io.BytesIO(first), mode="r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert set(members) == {"src", "src/train.py", "latest.py"}
    assert members["latest.py"].issym() and members["latest.py"].linkname == "src/train.py"
    assert members["src/train.py"].uid == 0 and members["src/train.py"].uname == ""
