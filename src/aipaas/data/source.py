"""A dataset's source as a node reads it: an fsspec filesystem, the files to copy.

The source travels from the controller to the node's copier as JSON (``SourceSpec``), its
credentials included: it is written only to files of the server's user (mode 0600) and removed
when the copy ends. An s3 source without credentials is read anonymously: the server's own
cloud credentials (environment, instance metadata) never serve a tenant's dataset. A
``file://`` source is read only under the roots a platform admin allows, symlinks resolved.
Whatever the protocol, ``open_source`` first checks the source's and endpoint's hosts and puts
the process under the connection guard (data/destinations.py: every connection, redirect and
hop checked at its address); a Secret may not set a proxy. Used by the node's data processes:
data/copier.py, data/stage.py, data/upload.py.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import posixpath
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import fsspec

from aipaas.data import destinations, http_listing
from aipaas.data.http_listing import HttpListingError, http_entries, is_http

#: protocols whose URL names the host read from (checked before the guard sees a connection)
HOST_PROTOCOLS = frozenset({"http", "https", "ftp", "webhdfs", "hdfs", "arrow_hdfs"})
S3_KEYS = {"accessKeyId": "key", "secretAccessKey": "secret", "sessionToken": "token"}


class SourceError(Exception):
    """The source cannot be read as asked (refused path, unknown protocol, listing failed)."""


@dataclass(frozen=True)
class SourceSpec:
    url: str
    endpoint: str | None = None
    #: the Secret's data (credentials); empty: anonymous
    credentials: Mapping[str, str] = field(default_factory=dict)
    sub_paths: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    #: roots a file:// source may lie under (settings.dataset_file_roots); empty: none
    file_roots: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "endpoint": self.endpoint,
            "credentials": dict(self.credentials),
            "sub_paths": list(self.sub_paths),
            "include": list(self.include),
            "file_roots": list(self.file_roots),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SourceSpec:
        return cls(
            url=str(data["url"]),
            endpoint=data.get("endpoint"),
            credentials=dict(data.get("credentials") or {}),
            sub_paths=tuple(data.get("sub_paths") or ()),
            include=tuple(data.get("include") or ()),
            file_roots=tuple(data.get("file_roots") or ()),
        )

    @property
    def protocol(self) -> str:
        scheme = urlsplit(self.url).scheme.lower()
        return "file" if scheme in ("", "file") else scheme


@dataclass(frozen=True)
class SourceFile:
    #: the path inside the dataset (relative, '/'-separated): where it lands in the cache
    relative: str
    #: the path the filesystem opens
    path: str
    size: int
    #: an MD5 the source vouches for (an S3 ETag of a single-part upload), or ""
    md5: str = ""


def storage_options(spec: SourceSpec) -> dict[str, Any]:
    """fsspec options for the protocol: s3 credentials and endpoint, or the Secret's keys."""
    if spec.protocol in ("s3", "s3a"):
        options: dict[str, Any] = {
            S3_KEYS[k]: v for k, v in spec.credentials.items() if k in S3_KEYS
        }
        if "key" not in options:
            options["anon"] = True
        if spec.endpoint:
            options["client_kwargs"] = {"endpoint_url": spec.endpoint}
        # A fresh client per process: an instance cached across forks or loops misbehaves.
        options["skip_instance_cache"] = True
        return options
    if spec.protocol == "file":
        return {}
    for key, value in spec.credentials.items():
        refused = destinations.proxy_key_refusal(key)
        if refused is not None:
            raise SourceError(refused)
        # gcsfs, adlfs and others read a credential *file* named in an option: a tenant's
        # Secret must not make the server read its own files.
        if value.startswith(("/", "~", "file:")) or "/." in value:
            raise SourceError(f"secret key {key}: a path is not a credential value here")
    return dict(spec.credentials)


def check_host(url: str) -> None:
    """Refuse a URL whose host is, or now resolves to, a refused address (link-local, cloud
    instance metadata: data/destinations.py), whatever its protocol."""
    host = urlsplit(url).hostname
    if not host:
        return
    try:
        destinations.check_host(host)
    except destinations.DestinationRefused as err:
        raise SourceError(str(err)) from err


def open_source(
    spec: SourceSpec, *, writing: bool = False
) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and the root path inside it (``writing``: a destination of outputs)."""
    options = storage_options(spec)
    if spec.protocol in ("hdfs", "arrow_hdfs"):  # api/data.py UNCHECKED_PROTOCOLS
        raise SourceError(f"{spec.protocol}:// connects from native code: use webhdfs://")
    if spec.protocol != "file":
        destinations.guard_process()  # every connection from here on, of every library
        check_host(spec.endpoint or "")
        if spec.protocol in HOST_PROTOCOLS:  # elsewhere the "host" is a bucket's name
            check_host(spec.url)
    if writing and spec.protocol == "file":
        options["auto_mkdir"] = True
    try:
        fs, root = fsspec.core.url_to_fs(spec.url, **options)
    except (ImportError, ValueError) as err:
        raise SourceError(f"cannot read {spec.protocol}:// sources here: {err}") from err
    if spec.protocol == "file":
        root = _allowed_local(root, spec.file_roots)
    return fs, str(root)


def refused_or(message: str) -> str:
    """The guard's refusal when a connection was refused (a library may have reported it as
    "not found" or as a failure to connect), else ``message``."""
    refused = destinations.refused()
    return refused[0] if refused else message


def _allowed_local(path: str, roots: Sequence[str]) -> str:
    real = os.path.realpath(path)
    for root in roots:
        base = os.path.realpath(root)
        if real == base or real.startswith(base.rstrip("/") + "/"):
            return real
    raise SourceError(f"file:// source {path} is outside the allowed dataset roots")


def list_files(spec: SourceSpec) -> list[SourceFile]:
    """Every file of the dataset (its sub-paths, filtered by its include patterns), sorted."""
    fs, root = open_source(spec)
    bases = [posixpath.join(root, sub) for sub in spec.sub_paths] or [root]
    found: dict[str, SourceFile] = {}
    for base in bases:
        try:
            if is_http(spec.protocol):
                entries = http_entries(fs, base)  # a directory: the links of its index page
            elif spec.protocol == "file":
                entries = _entries(fs, base)
            else:
                listing = functools.partial(_entries, fs, base)
                entries = _within(http_listing.LIST_SECONDS, spec.url, listing)
        except HttpListingError as err:
            raise SourceError(refused_or(str(err))) from err
        except (OSError, ValueError) as err:
            raise SourceError(refused_or(f"cannot list {base}: {err}")) from err
        for path, info in entries.items():
            if info.get("type") == "directory":
                continue
            relative = _relative(str(path), root, fs)
            if spec.include and not any(fnmatch.fnmatch(relative, p) for p in spec.include):
                continue
            if spec.protocol == "file":
                _allowed_local(str(path), spec.file_roots)  # a symlink out of the root
            found[relative] = SourceFile(
                relative, str(path), int(info.get("size") or 0), _md5(info)
            )
    return [found[key] for key in sorted(found)]


def _entries(fs: fsspec.AbstractFileSystem, base: str) -> dict[str, dict[str, Any]]:
    if fs.isfile(base):
        return {base: fs.info(base)}
    found: dict[str, dict[str, Any]] = fs.find(base, detail=True)
    return found


T = TypeVar("T")


def _within(seconds: float, url: str, call: Callable[[], T]) -> T:
    """``call()``'s answer, or SourceError after ``seconds``: a source whose listing never
    ends (a generated tree) must not keep its reader forever. The call goes on in a daemon
    thread, which ends with the process (a copier or stage that has failed)."""
    answer: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            answer.append(call())
        except BaseException as err:
            failure.append(err)

    worker = threading.Thread(target=run, name="listing", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise SourceError(f"spec.source {url}: not listed within {seconds:g} s")
    if failure:
        raise failure[0]
    return answer[0]


def _relative(path: str, root: str, fs: fsspec.AbstractFileSystem) -> str:
    stripped = fs._strip_protocol(root).rstrip("/")
    full = fs._strip_protocol(path)
    relative = full[len(stripped) :].lstrip("/") if full.startswith(stripped) else ""
    if not relative:
        relative = posixpath.basename(full) or "data"
    if is_http(urlsplit(full).scheme.lower()):
        relative = unquote(relative)  # a link's %20 is a space in the file's name
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise SourceError(f"the source names a path outside the dataset: {path}")
    return "/".join(parts)


def _md5(info: Mapping[str, Any]) -> str:
    """The ETag of an S3 object when it is an MD5 (single-part uploads); "" otherwise."""
    etag = str(info.get("ETag") or info.get("etag") or "").strip('"').lower()
    if len(etag) == 32 and all(c in "0123456789abcdef" for c in etag):
        return etag
    return ""


def local_path(cache_data: Path, relative: str) -> Path:
    """Where a source file lands in an entry's data directory (never outside it)."""
    target = (cache_data / relative).resolve()
    if cache_data.resolve() not in target.parents:
        raise SourceError(f"refusing to write outside the cache: {relative}")
    return target
