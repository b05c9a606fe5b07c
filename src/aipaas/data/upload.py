"""Upload a task's output directory to its destination when the task ends.

The stage (data/stage.py) runs as the server's user, possibly root, and the directory was
written by the task's user: nothing in it is followed. The walk opens every directory and file
relative to its parent's descriptor with O_NOFOLLOW, so a symlink (to /etc/shadow, to another
tenant's cache) is skipped, never read, even if it replaces a file during the walk; only
regular files owned by the task's user (when tasks run as their own users) are uploaded.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Iterator
from pathlib import Path

from aipaas.data.source import SourceSpec, open_source

CHUNK = 8 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK  # a FIFO must not block the stage


def regular_files(directory: Path, owner: int | None) -> Iterator[tuple[str, int]]:
    """(relative path, open descriptor) of each regular file under ``directory``; the caller
    closes the descriptor."""
    try:
        top = os.open(directory, _DIR_FLAGS)
    except OSError:
        return
    yield from _walk(top, "", owner)


def _walk(directory: int, prefix: str, owner: int | None) -> Iterator[tuple[str, int]]:
    try:
        names = sorted(os.listdir(directory))
        for name in names:
            try:
                descriptor = os.open(name, _FILE_FLAGS, dir_fd=directory)
            except OSError:  # a symlink (ELOOP), gone, unreadable
                continue
            info = os.fstat(descriptor)
            if owner is not None and info.st_uid != owner:
                os.close(descriptor)
            elif stat.S_ISDIR(info.st_mode):
                os.close(descriptor)
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=directory)
                except OSError:
                    continue
                yield from _walk(child, f"{prefix}{name}/", owner)
            elif stat.S_ISREG(info.st_mode):
                os.set_blocking(descriptor, True)
                yield f"{prefix}{name}", descriptor
            else:
                os.close(descriptor)
    finally:
        os.close(directory)


def upload(directory: Path, destination: SourceSpec, owner: int | None = None) -> int:
    """Copy the directory's regular files under the destination URL; the bytes uploaded."""
    fs, root = open_source(destination, writing=True)
    total = 0
    for relative, descriptor in regular_files(directory, owner):
        with (
            os.fdopen(descriptor, "rb") as source,
            fs.open(posixpath.join(root, relative), "wb") as out,
        ):
            while chunk := source.read(CHUNK):
                out.write(chunk)
                total += len(chunk)
    return total
