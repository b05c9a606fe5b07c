"""Fill a cache entry from its source: whole files, in parallel, resumable, verified.

Each file is copied to ``<name>.aipaas-part``, appended to in order; a copier killed at any
moment leaves a prefix that the next one resumes from (its bytes are hashed again, then the
rest is read from that offset). A file is renamed to its name only once its size matches the
source's and, where the source vouches for an MD5 (an S3 single-part ETag), its MD5 does; its
SHA-256 goes in the manifest. A mismatch discards the part and copies the file once more.

Run as ``python -m aipaas.data.copier ENTRY`` for a background load: it reads the source from
ENTRY/load.json, holds the entry's lock while it works, and removes load.json at the end. A
load whose load.json is removed by someone else is withdrawn (its dataset was deleted:
data/cache.py ``cancel_load``): the copier ends within ``WATCH_SECONDS``, whatever it was
waiting for (a source that answers slowly, a listing without end, the entry's lock).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aipaas.data.entry import ERROR, LOAD, MANIFEST, PART_SUFFIX, Entry, write_atomic
from aipaas.data.source import (
    SourceError,
    SourceFile,
    SourceSpec,
    list_files,
    local_path,
    open_source,
    refused_or,
)

CHUNK = 8 << 20
WORKERS = 4
#: how often a background load checks it is still wanted
WATCH_SECONDS = 0.5
EXIT_WITHDRAWN = 75  # EX_TEMPFAIL


class ChecksumError(Exception):
    """A copied file does not match what its source vouches for."""

    def __init__(self, message: str, read: int = 0) -> None:
        super().__init__(message)
        self.read = read  # bytes read from the source by the attempt


@dataclass(frozen=True)
class FillResult:
    files: int
    size_bytes: int
    copied_bytes: int  # read from the source by this fill


def fill(
    entry: Entry,
    spec: SourceSpec,
    *,
    reserve: Callable[[int], None] | None = None,
    workers: int = WORKERS,
) -> FillResult:
    """Copy what is missing; call under the entry's lock. ``reserve(bytes)`` is asked for the
    room still needed before anything is copied (it evicts or raises)."""
    files = list_files(spec)
    manifest = entry.read_json(MANIFEST)
    known: dict[str, Any] = manifest.get("files", {}) if manifest.get("url") == spec.url else {}
    todo = [f for f in files if not _done(entry, f, known.get(f.relative))]
    state = {f.relative: known.get(f.relative) or _record(f) for f in files}
    total = sum(f.size for f in files)
    write_manifest = _manifest_writer(entry, spec, state, total)
    write_manifest(False)
    if reserve is not None:
        reserve(sum(f.size - _part_size(entry, f) for f in todo))
    fs, _root = open_source(spec)
    copied = [0]
    lock = threading.Lock()

    def copy(file: SourceFile) -> None:
        digest, count = _copy_one(fs, entry, file)
        with lock:
            copied[0] += count
            state[file.relative] = {**_record(file), "sha256": digest, "done": True}
            write_manifest(False)

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(todo) or 1))) as pool:
        for future in [pool.submit(copy, f) for f in todo]:
            future.result()  # the first failure is raised (the others finish or fail too)
    write_manifest(True)
    with contextlib.suppress(FileNotFoundError):
        (entry.path / ERROR).unlink()
    return FillResult(len(files), total, copied[0])


def cached(entry: Entry, spec: SourceSpec) -> FillResult | None:
    """The entry as complete as its manifest says, every file there at its size: a hit served
    without asking the source (the entry's key changes with the source's URL, sub-paths and
    patterns; new objects at the same URL are seen once the entry is evicted or expires)."""
    manifest = entry.read_json(MANIFEST)
    if not manifest.get("complete") or manifest.get("url") != spec.url:
        return None
    files: dict[str, Any] = manifest.get("files", {})
    for relative, record in files.items():
        try:
            if local_path(entry.data, relative).stat().st_size != record.get("size"):
                return None
        except (FileNotFoundError, SourceError):
            return None
    return FillResult(len(files), int(manifest.get("size", 0)), 0)


def _manifest_writer(
    entry: Entry, spec: SourceSpec, state: dict[str, Any], total: int
) -> Callable[[bool], None]:
    def write(complete: bool) -> None:
        entry.write_json(
            MANIFEST,
            {"url": spec.url, "files": state, "size": total, "complete": complete},
        )

    return write


def _record(file: SourceFile) -> dict[str, Any]:
    return {"size": file.size, "md5": file.md5, "done": False}


def _done(entry: Entry, file: SourceFile, record: dict[str, Any] | None) -> bool:
    """Copied before, and still the same file (size and source checksum) on both sides."""
    if not record or not record.get("done"):
        return False
    if record.get("size") != file.size or record.get("md5", "") != file.md5:
        return False
    try:
        return local_path(entry.data, file.relative).stat().st_size == file.size
    except FileNotFoundError:
        return False


def _part_size(entry: Entry, file: SourceFile) -> int:
    try:
        part = local_path(entry.data, file.relative + PART_SUFFIX)
        return min(part.stat().st_size, file.size)
    except (FileNotFoundError, SourceError):
        return 0


def _copy_one(fs: Any, entry: Entry, file: SourceFile) -> tuple[str, int]:
    """(sha256, bytes read from the source); one retry from scratch on a checksum mismatch."""
    try:
        return _attempt(fs, entry, file)
    except ChecksumError as err:
        local_path(entry.data, file.relative + PART_SUFFIX).unlink(missing_ok=True)
        digest, read = _attempt(fs, entry, file)
        return digest, err.read + read


def _attempt(fs: Any, entry: Entry, file: SourceFile) -> tuple[str, int]:
    target = local_path(entry.data, file.relative)
    part = local_path(entry.data, file.relative + PART_SUFFIX)
    target.parent.mkdir(parents=True, exist_ok=True)
    sha, md5 = hashlib.sha256(), hashlib.md5(usedforsecurity=False)
    offset = 0
    if part.exists():
        if part.stat().st_size > file.size:
            part.unlink()
        else:
            with open(part, "rb") as done:
                while chunk := done.read(CHUNK):
                    sha.update(chunk)
                    md5.update(chunk)
                    offset += len(chunk)
    read = 0
    with open(part, "ab") as out:
        if offset < file.size:
            with fs.open(file.path, "rb") as source:
                source.seek(offset)
                while chunk := source.read(CHUNK):
                    out.write(chunk)
                    sha.update(chunk)
                    md5.update(chunk)
                    read += len(chunk)
        out.flush()
        os.fsync(out.fileno())
    size = part.stat().st_size
    if size != file.size:
        raise ChecksumError(f"{file.relative}: {size} bytes, the source has {file.size}", read)
    if file.md5 and md5.hexdigest() != file.md5:
        raise ChecksumError(f"{file.relative}: MD5 {md5.hexdigest()} is not the source's", read)
    os.chmod(part, 0o444)
    os.replace(part, target)
    return sha.hexdigest(), read


def main(argv: list[str]) -> int:
    """A background load of one entry (the local backend starts it; see module doc)."""
    if len(argv) != 1:
        print("usage: python -m aipaas.data.copier ENTRY", file=sys.stderr)
        return 2
    entry = Entry(Path(argv[0]))
    load = entry.read_json(LOAD)
    mine = _identity(entry)
    if not load or mine is None:
        return 0
    from aipaas.data.cache import NodeCache

    cache = NodeCache(entry.path.parent.parent, int(load["capacity"]))
    spec = SourceSpec.from_json(load["source"])
    ending = threading.Lock()  # held by whoever ends the load: the copy or the withdrawal
    ended = threading.Event()
    watch = threading.Thread(target=_end_if_withdrawn, args=(entry, mine, ending, ended))
    watch.daemon = True
    watch.start()
    try:
        with entry.locked():
            # Complete already (a task staged it while this load waited for its node):
            # the source is not asked again.
            result = cached(entry, spec) or fill(entry, spec, reserve=cache.room_for(entry))
            # A load counts as a use: its time to live starts now.
            entry.update_stats(
                bytes_from_source=result.copied_bytes, loads=1, last_used=time.time()
            )
    except Exception as err:
        said = refused_or(f"{type(err).__name__}: {err}")
        write_atomic(entry.path / ERROR, said)
        print(f"load of {entry.path} failed: {said}", file=sys.stderr)
        return 1
    finally:
        with ending:
            ended.set()
        if _identity(entry) == mine:  # not a newer load's, asked for since
            (entry.path / LOAD).unlink(missing_ok=True)  # the credentials go with it
    return 0


def _identity(entry: Entry) -> tuple[int, int] | None:
    """Which load.json is there (inode and time written), None when none is: a load withdrawn
    and asked for again has a new one, and is the new load's, not this copier's."""
    try:
        found = (entry.path / LOAD).stat()
    except FileNotFoundError:
        return None
    return found.st_ino, found.st_mtime_ns


def _end_if_withdrawn(
    entry: Entry, mine: tuple[int, int], ending: threading.Lock, ended: threading.Event
) -> None:
    """End the process once its load.json is gone or replaced (the load was withdrawn) unless
    the copy ended first. A hard exit: the threads reading the source may be blocked in a read;
    the lock goes with the process, the parts copied stay for whoever fills the entry next."""
    while not ended.wait(WATCH_SECONDS):
        with ending:
            if ended.is_set() or _identity(entry) == mine:
                continue
            if entry.path.is_dir():
                write_atomic(entry.path / ERROR, "withdrawn: the dataset is gone")
            print(f"load of {entry.path} withdrawn: the dataset is gone", file=sys.stderr)
            sys.stderr.flush()
            os._exit(EXIT_WITHDRAWN)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
