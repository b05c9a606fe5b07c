"""Uploaded workdirs: which archives are safe to unpack, and how a tenant's uploads are kept
within its limit (the least recently uploaded archive no unfinished job names goes first)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from aipaas.errors import InvalidObject, PayloadTooLarge
from aipaas.server.workdir_routes import check_archive, make_room


def archive(*members: tarfile.TarInfo, data: bytes = b"x") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info in members:
            if info.isfile():
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def test_a_folder_with_files_links_inside_and_hard_links_is_accepted() -> None:
    body = archive(
        member("src", tarfile.DIRTYPE),
        member("src/train.py"),
        member("latest", tarfile.SYMTYPE, "src/train.py"),
        member("src/again.py", tarfile.LNKTYPE, "src/train.py"),
        member("./data/x.txt"),
    )
    assert check_archive(body) == (5, 2)


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (member("a/../../b"), "'a/../../b': has a '..' component"),
        (member("/abs"), "'/abs': is an absolute path"),
        (member("up", tarfile.SYMTYPE, "sub/../../x"), "'up': links to sub/../../x, outside"),
        (member("h", tarfile.LNKTYPE, "nowhere"), "'h': is a hard link to no earlier file"),
        (member("fifo", tarfile.FIFOTYPE), "'fifo': is not a file, directory or link"),
        (member("dev", tarfile.CHRTYPE), "'dev': is not a file, directory or link"),
    ],
)
def test_an_unsafe_member_is_refused_by_name(bad: tarfile.TarInfo, said: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        check_archive(archive(member("ok.py"), bad))
    assert said in caught.value.message


def test_a_link_that_a_later_member_is_written_through_is_refused() -> None:
    body = archive(member("d", tarfile.SYMTYPE, "inside"), member("d/x.py"))
    with pytest.raises(InvalidObject, match=r"'d/x\.py': is written through the link d"):
        check_archive(body)


def keep(directory: Path, name: str, size: int, age: int) -> Path:
    path = directory / f"{name}.tar.gz"
    path.write_bytes(b"0" * size)
    os.utime(path, (1_000_000 + age, 1_000_000 + age))
    return path


def test_room_is_made_by_removing_the_oldest_archives_no_unfinished_job_names(
    tmp_path: Path,
) -> None:
    oldest_in_use = keep(tmp_path, "sha256-a", 40, 0)
    old = keep(tmp_path, "sha256-b", 40, 1)
    newer = keep(tmp_path, "sha256-c", 40, 2)
    make_room(tmp_path, 30, 130, keep={"sha256-a"})
    assert oldest_in_use.exists() and not old.exists() and newer.exists()


def test_an_upload_is_refused_when_archives_in_use_leave_no_room(tmp_path: Path) -> None:
    keep(tmp_path, "sha256-a", 60, 0)
    keep(tmp_path, "sha256-b", 60, 1)
    with pytest.raises(PayloadTooLarge, match="named by unfinished jobs take 120 bytes"):
        make_room(tmp_path, 30, 130, keep={"sha256-a", "sha256-b"})
