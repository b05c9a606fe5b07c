"""Uploaded working directories: ``POST /api/v1/workdirs?tenant=T`` with a tar.gz body.

Who calls it: ``aipaas run --workdir DIR`` (cli/run.py) packs DIR and sends it here, then
submits a Job whose ``spec.workdir`` names the answer (``sha256-<hex>``, the archive's digest:
the same folder uploaded twice is stored once). The local backend unpacks it into each task's
working directory, as the task's user, before the task starts (backends/local/runner.py).

What is refused, each in one line naming the archive member and why (422): an absolute path,
a ``..`` component, a link whose target leaves the directory or that a later member is written
through, a hard link to anything but an earlier file, a device, FIFO or other special file,
more than ``MAX_FILES`` members or ``MAX_UNPACKED_BYTES`` unpacked (a gzip bomb), and an upload
that is not a gzip-compressed tar. The body is bounded by the server's request limit
(``max_body_bytes``) and ``MAX_ARCHIVE_BYTES``; a tenant's uploads together by
``MAX_TENANT_BYTES``: past it the least recently uploaded archives that no unfinished job names
are removed, and only when those that are named leave no room is the upload refused (413).

Where they are kept: ``workdirs/<tenant>/<name>.tar.gz`` in the data directory (the SQLite
database's directory), 0600, which only the server reads; the local backend finds them there
(its run directory's parent). A server on PostgreSQL has no data directory of its tasks' own
here and refuses uploads, saying so.
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import secrets
import tarfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from aipaas.api.job import Job
from aipaas.errors import FieldError, Forbidden, InvalidObject, NotFound, PayloadTooLarge
from aipaas.server.auth import principal_of
from aipaas.server.body_limit import read_body
from aipaas.store import Store
from aipaas.store.health import sqlite_file
from aipaas.tenancy.principal import Principal, Verb

#: in the data directory; the local backend reads the same path (backends/local/backend.py)
WORKDIRS_DIR = "workdirs"
MAX_ARCHIVE_BYTES = 64 << 20
MAX_UNPACKED_BYTES = 512 << 20
MAX_FILES = 20_000
MAX_TENANT_BYTES = 1 << 30

router = APIRouter(tags=["workdirs"])  # under routes.router's /api/v1
Caller = Annotated[Principal, Depends(principal_of)]
TenantQuery = Annotated[str | None, Query(max_length=63, description="Tenant (admins)")]


_ARCHIVE_BODY: dict[str, Any] = {
    "required": True,
    "description": "A gzip-compressed tar of the folder, at most the server's body limit.",
    # Declared as octet-stream (what the CLI sends, what API tools and the fuzzing of the
    # document can produce); the bytes must be a gzip-compressed tar whatever the type says.
    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
}


@router.post(
    "/workdirs",
    status_code=201,
    summary="Upload a working directory (tar.gz)",
    openapi_extra={"requestBody": _ARCHIVE_BODY},
)
async def upload_workdir(
    request: Request, caller: Caller, tenant: TenantQuery = None
) -> dict[str, Any]:
    """The archive's name for ``spec.workdir``, its size and member count."""
    store: Store = request.app.state.store
    wanted = tenant or caller.tenant
    if not wanted:
        raise InvalidObject([FieldError("tenant", "which tenant? a platform admin must name one")])
    if not caller.sees_tenant(wanted):
        raise NotFound(f"tenant {wanted} not found")
    if not caller.may(Verb.WRITE, "Job"):
        raise Forbidden(f"role {caller.role} may not submit jobs, nor upload their workdirs")
    root = workdir_root(store)
    limit = min(MAX_ARCHIVE_BYTES, request.app.state.max_body_bytes)
    body = await read_body(request, limit)
    return await run_in_threadpool(_keep, store, root, wanted, body)


def workdir_root(store: Store) -> Path:
    database = sqlite_file(str(store.engine.url))
    if database is None:
        raise InvalidObject(
            [
                FieldError(
                    "workdir",
                    "this server keeps no uploaded workdirs: they live beside a SQLite "
                    "database, and its database is elsewhere",
                )
            ]
        )
    return database.resolve().parent / WORKDIRS_DIR


def check_archive(body: bytes) -> tuple[int, int]:
    """(members, unpacked bytes) of a tar.gz that is safe to unpack; InvalidObject naming the
    first member at fault otherwise."""
    files = unpacked = 0
    kinds: dict[str, str] = {}  # member path -> "file", "dir" or "link"
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
            for member in tar:
                files += 1
                if files > MAX_FILES:
                    raise _bad("", f"more than {MAX_FILES} members")
                path = _member_path(member.name)
                for parent in _parents(path):
                    if kinds.get(parent) == "link":
                        raise _bad(member.name, f"is written through the link {parent}")
                if member.issym():
                    target = posixpath.normpath(
                        posixpath.join(posixpath.dirname(path), member.linkname)
                    )
                    if member.linkname.startswith("/") or target.split("/")[0] == "..":
                        raise _bad(member.name, f"links to {member.linkname}, outside the workdir")
                    kinds[path] = "link"
                elif member.islnk():
                    target = _member_path(member.linkname)
                    if kinds.get(target) != "file":
                        raise _bad(member.name, "is a hard link to no earlier file of the archive")
                    kinds[path] = "file"
                elif member.isdir():
                    kinds[path] = "dir"
                elif member.isfile():
                    unpacked += member.size
                    if unpacked > MAX_UNPACKED_BYTES:
                        raise _bad("", f"unpacks to more than {MAX_UNPACKED_BYTES} bytes")
                    kinds[path] = "file"
                else:
                    raise _bad(member.name, "is not a file, directory or link")
    except (tarfile.TarError, EOFError, OSError) as err:
        raise _bad("", f"not a gzip-compressed tar archive ({err})") from err
    return files, unpacked


def _member_path(name: str) -> str:
    if name.startswith("/"):
        raise _bad(name, "is an absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise _bad(name, "has a '..' component")
    return "/".join(parts) or "."


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:end]) for end in range(1, len(parts))]


def _bad(member: str, reason: str) -> InvalidObject:
    where = f"workdir archive member {member!r}" if member else "workdir archive"
    return InvalidObject([FieldError(where, reason)])


def make_room(directory: Path, needed: int, limit: int, keep: set[str]) -> None:
    """Remove the tenant's least recently uploaded archives that no unfinished job names
    (``keep``) until ``needed`` more bytes fit under ``limit``; PayloadTooLarge when the
    archives that must be kept leave no room."""
    archives = sorted(directory.glob("*.tar.gz"), key=lambda entry: entry.stat().st_mtime)
    used = sum(entry.stat().st_size for entry in archives)
    for entry in archives:
        if used + needed <= limit:
            return
        if entry.name.removesuffix(".tar.gz") in keep:
            continue
        size = entry.stat().st_size
        entry.unlink(missing_ok=True)
        used -= size
    if used + needed > limit:
        raise PayloadTooLarge(
            f"the tenant's workdirs named by unfinished jobs take {used} bytes; this one "
            f"({needed} bytes) would pass the limit of {limit}"
        )


def _in_use(store: Store, tenant: str) -> set[str]:
    """The workdirs that the tenant's unfinished jobs name."""
    names: set[str] = set()
    for job in store.list_objects("Job", tenant):
        if not isinstance(job, Job) or job.spec.workdir is None:
            continue
        if job.status is None or not job.status.phase.finished:
            names.add(job.spec.workdir)
    return names


def _keep(store: Store, root: Path, tenant: str, body: bytes) -> dict[str, Any]:
    files, unpacked = check_archive(body)
    name = "sha256-" + hashlib.sha256(body).hexdigest()
    directory = root / tenant
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    target = directory / f"{name}.tar.gz"
    if target.exists():
        os.utime(target)  # uploaded again: the most recent, the last to make room
    else:
        make_room(directory, len(body), MAX_TENANT_BYTES, _in_use(store, tenant))
        temporary = directory / f".{name}.{secrets.token_hex(4)}"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(body)
        os.replace(temporary, target)
    return {"workdir": name, "bytes": len(body), "files": files, "unpackedBytes": unpacked}
