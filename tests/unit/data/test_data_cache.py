"""The node cache with real files and real processes: fills from file:// sources under an
allowed root, eviction by the policy (recency, size, queued demand, pins) that never removes an
entry a live task holds, and the refusals of a source outside its roots."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aipaas.data.cache import CacheFull, NodeCache
from aipaas.data.copier import cached, fill
from aipaas.data.entry import MANIFEST
from aipaas.data.source import SourceError, SourceSpec

MIB = 1 << 20


def _source(root: Path, name: str, sizes: list[int]) -> SourceSpec:
    directory = root / name
    directory.mkdir(parents=True)
    for index, size in enumerate(sizes):
        (directory / f"f{index}.bin").write_bytes(os.urandom(size))
    return SourceSpec(f"file://{directory}", file_roots=(str(root),))


def _fill(cache: NodeCache, key: str, spec: SourceSpec, last_used: float) -> None:
    entry = cache.entry(key)
    with entry.locked():
        fill(entry, spec, reserve=cache.room_for(entry))
        entry.update_stats(last_used=last_used)


@pytest.fixture
def reader() -> Iterator[subprocess.Popen[bytes]]:
    """A live process whose command line names request ``task-1`` (a task's runner)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "task-1"])
    yield process
    process.kill()
    process.wait()


def test_fill_copies_verified_files_and_a_second_fill_reads_nothing(tmp_path: Path) -> None:
    spec = _source(tmp_path / "src", "ds", [MIB, 3 * MIB + 7, 0])
    cache = NodeCache(tmp_path / "cache", 64 * MIB)
    entry = cache.entry("acme/ds-1")
    with entry.locked():
        result = fill(entry, spec)
    assert (result.files, result.copied_bytes) == (3, 4 * MIB + 7)
    manifest = entry.read_json(MANIFEST)
    for name, record in manifest["files"].items():
        data = (tmp_path / "src" / "ds" / name).read_bytes()
        assert record["sha256"] == hashlib.sha256(data).hexdigest()
        assert (entry.data / name).read_bytes() == data
        assert (entry.data / name).stat().st_mode & 0o222 == 0  # read-only
    assert cached(entry, spec) is not None
    with entry.locked():
        assert fill(entry, spec).copied_bytes == 0
    (entry.data / "f0.bin").unlink()  # a file gone: no longer a hit, refilled
    assert cached(entry, spec) is None
    with entry.locked():
        assert fill(entry, spec).copied_bytes == MIB


def test_room_is_made_by_the_policy_and_never_from_an_entry_in_use(
    tmp_path: Path, reader: subprocess.Popen[bytes]
) -> None:
    sources = tmp_path / "src"
    cache = NodeCache(tmp_path / "cache", 10 * MIB)
    now = time.time()
    _fill(cache, "acme/old-1", _source(sources, "old", [3 * MIB]), now - 7200)
    _fill(cache, "acme/read-1", _source(sources, "read", [3 * MIB]), now - 9000)
    _fill(cache, "acme/wanted-1", _source(sources, "wanted", [3 * MIB]), now - 9000)
    cache.entry("acme/read-1").add_lease("task-1", reader.pid)
    cache.set_hints(pinned=[], demand={"acme/wanted-1": 3})

    # 4 MiB more: one 3 MiB entry must go. The oldest is read now and the other old one is
    # wanted by three queued jobs: the recent but unwanted one goes.
    _fill(cache, "acme/new-1", _source(sources, "new", [4 * MIB]), now)
    assert cache.keys() == ["acme/new-1", "acme/read-1", "acme/wanted-1"]
    assert cache.state("acme/read-1").in_use == 1
    assert not cache.evict("acme/read-1")  # asked directly: refused too

    # Nothing but pinned and read entries: no room, and nothing is removed.
    cache.set_hints(pinned=["acme/wanted-1", "acme/new-1"], demand={})
    with pytest.raises(CacheFull):
        _fill(cache, "acme/big-1", _source(sources, "big", [5 * MIB]), now)
    assert {"acme/new-1", "acme/read-1", "acme/wanted-1"} <= set(cache.keys())
    for key in ("acme/new-1", "acme/read-1", "acme/wanted-1"):
        assert cache.state(key).complete

    reader.kill()  # the task ends: its lease is dead, the entry may go
    reader.wait()
    _fill(cache, "acme/big2-1", _source(sources, "big2", [3 * MIB]), now)
    assert cache.keys() == ["acme/big2-1", "acme/new-1", "acme/wanted-1"]


def test_an_entry_being_filled_is_not_evicted(tmp_path: Path) -> None:
    cache = NodeCache(tmp_path / "cache", 8 * MIB)
    _fill(cache, "acme/a-1", _source(tmp_path / "src", "a", [MIB]), 0)
    with cache.entry("acme/a-1").locked():
        assert not cache.evict("acme/a-1")
    assert cache.evict("acme/a-1")
    assert cache.keys() == []


def test_file_sources_only_under_allowed_roots(tmp_path: Path) -> None:
    secret = tmp_path / "private"
    secret.mkdir()
    (secret / "db").write_text("tokens")
    allowed = tmp_path / "shared"
    allowed.mkdir()
    (allowed / "escape").symlink_to(secret)
    cache = NodeCache(tmp_path / "cache", 8 * MIB)
    entry = cache.entry("acme/x-1")
    attempts = [
        SourceSpec(f"file://{secret}"),  # no roots at all
        SourceSpec(f"file://{secret}", file_roots=(str(allowed),)),
        SourceSpec(f"file://{allowed}/escape", file_roots=(str(allowed),)),  # a symlink out
        SourceSpec(f"file://{allowed}/../private", file_roots=(str(allowed),)),
    ]
    for spec in attempts:
        with entry.locked(), pytest.raises(SourceError):
            fill(entry, spec)
    assert not (entry.data / "db").exists()


def test_cache_keys_cannot_leave_the_root(tmp_path: Path) -> None:
    cache = NodeCache(tmp_path / "cache", MIB)
    for key in ("../x", "acme/../../x", "acme/.hidden", "acme", "/abs/x", "acme/a/b"):
        with pytest.raises(ValueError):
            cache.entry(key)


def test_sources_that_would_reach_the_servers_own_secrets_are_refused(tmp_path: Path) -> None:
    cache = NodeCache(tmp_path / "cache", MIB)
    entry = cache.entry("acme/meta-1")
    attempts = [
        (SourceSpec("http://169.254.169.254/latest/meta-data/"), "link-local"),  # metadata
        (SourceSpec("s3://bucket/x", endpoint="http://169.254.169.254/"), "link-local"),
        (SourceSpec("http://[fe80::1]/x"), "link-local"),
        (
            SourceSpec("gcs://b/x", credentials={"token": "/root/.config/gcloud/creds.json"}),
            "a path is not a credential",
        ),
        (SourceSpec("abfs://c/x", credentials={"account_key": "~/.azure/key"}), "a path"),
    ]
    for spec, reason in attempts:
        with entry.locked(), pytest.raises(SourceError, match=reason):
            fill(entry, spec)


def test_the_hints_file_is_the_servers_alone(tmp_path: Path) -> None:
    cache = NodeCache(tmp_path / "cache", MIB)
    cache.root.mkdir()
    cache.set_hints(["acme/secret-project-1"], {"rival/x-1": 2})
    assert (cache.root / "policy.json").stat().st_mode & 0o077 == 0
