"""The copier against a real S3 API (moto's server): a background load killed with SIGKILL
mid-copy is resumed by the next one without a corrupt file, and a corrupted partial file is
caught by the source's checksum and copied again."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aipaas.data.cache import NodeCache
from aipaas.data.copier import fill
from aipaas.data.entry import LOAD, MANIFEST, PART_SUFFIX
from aipaas.data.source import SourceSpec
from tests.integration.s3_server import ACCESS_KEY, SECRET_KEY, S3Server
from tests.support.server_process import free_port

BUCKET = "crash"
MIB = 1 << 20


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(free_port(), tmp_path_factory.mktemp("moto") / "moto.log").start()
    yield server
    server.stop()


def _spec(s3: S3Server, prefix: str) -> SourceSpec:
    return SourceSpec(
        f"s3://{BUCKET}/{prefix}",
        endpoint=s3.url,
        credentials={"accessKeyId": ACCESS_KEY, "secretAccessKey": SECRET_KEY},
    )


def _parts(root: Path) -> list[Path]:
    return [p for p in root.rglob(f"*{PART_SUFFIX}") if p.stat().st_size > 0]


def test_a_copier_killed_mid_copy_resumes_without_corrupt_files(
    s3: S3Server, tmp_path: Path
) -> None:
    objects = {f"big/f{i}.bin": os.urandom(32 * MIB) for i in range(3)}
    s3.upload(BUCKET, objects)
    cache = NodeCache(tmp_path / "cache", 1 << 30)
    entry = cache.entry("acme/big-1")
    entry.path.mkdir(parents=True)
    load = {"source": _spec(s3, "big").to_json(), "capacity": cache.capacity_bytes}
    entry.write_json(LOAD, load, private=True)
    # S3 sends a MiB every 0.1 s while the copier runs (about 10 s for the whole copy): it is
    # surely caught mid-copy, however slowly this test gets the CPU.
    s3.throttle(0.1)
    try:
        copier = subprocess.Popen(
            [sys.executable, "-m", "aipaas.data.copier", str(entry.path)], start_new_session=True
        )
        deadline = time.monotonic() + 90
        while not _parts(entry.path) and time.monotonic() < deadline and copier.poll() is None:
            time.sleep(0.005)
        assert copier.poll() is None, "the copy ended before it could be killed"
        os.killpg(copier.pid, signal.SIGKILL)
        copier.wait()
    finally:
        s3.throttle(0)

    total = 3 * 32 * MIB
    partial = sum(p.stat().st_size for p in _parts(entry.path))
    before = json.loads((entry.path / MANIFEST).read_text())
    done = sum(r["size"] for r in before["files"].values() if r.get("done"))
    assert partial > 0 and done + partial < total and not before["complete"]
    assert not entry.is_locked()  # the dead copier's lock went with it

    s3.forget()
    with entry.locked():
        result = fill(entry, _spec(s3, "big"), reserve=cache.room_for(entry))
    assert result.copied_bytes == total - done - partial  # nothing read twice
    for key, data in objects.items():
        name = key.removeprefix("big/")
        assert (entry.data / name).read_bytes() == data
    assert not list(entry.path.rglob(f"*{PART_SUFFIX}"))
    manifest = json.loads((entry.path / MANIFEST).read_text())
    assert manifest["complete"]
    for key, data in objects.items():
        record = manifest["files"][key.removeprefix("big/")]
        assert record["sha256"] == hashlib.sha256(data).hexdigest()
    ranged = [path for method, path in s3.requests() if method == "GET" and ".bin" in path]
    assert ranged, "the rest was read from S3"


def test_a_corrupt_partial_file_is_caught_by_the_checksum(s3: S3Server, tmp_path: Path) -> None:
    data = os.urandom(5 * MIB)
    s3.upload(BUCKET, {"small/f.bin": data})
    cache = NodeCache(tmp_path / "cache", 1 << 30)
    entry = cache.entry("acme/small-1")
    entry.data.mkdir(parents=True)
    # A part whose bytes are not the source's (a disk that lied before a crash).
    (entry.data / f"f.bin{PART_SUFFIX}").write_bytes(b"\0" * MIB)
    with entry.locked():
        result = fill(entry, _spec(s3, "small"))
    assert (entry.data / "f.bin").read_bytes() == data
    assert result.copied_bytes == 4 * MIB + 5 * MIB  # resumed, refused, copied whole again
