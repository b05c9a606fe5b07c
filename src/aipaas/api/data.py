"""Dataset and Secret (issue 13: data near compute).

A Dataset names data read through fsspec (``s3://``, ``http(s)://``, ``file://`` under roots a
platform admin allows, any other installed protocol) and how the nodes may cache it. Its
credentials live in a Secret of the same tenant (``spec.secretRef``): the server refuses a
reference to any other tenant's object, and the API never returns a Secret's values.
A job names datasets in ``spec.datasets`` (DatasetMount) and output locations in
``spec.outputs`` (OutputLocation), both defined here.
"""

from __future__ import annotations

import re
from decimal import Decimal
from enum import StrEnum
from functools import lru_cache
from typing import Annotated, ClassVar, Final, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, field_validator

from aipaas.api.duration import PositiveDuration
from aipaas.api.meta import LenientModel, Model, Name, Object
from aipaas.api.quantity import QuantityStr, parse_quantity
from aipaas.data.destinations import literal_refusal

#: protocols that read the server's own disks or chain filesystems: a tenant could name the
#: database or another tenant's cache with them. ``file://`` is allowed only under the roots a
#: platform admin configures (settings.dataset_file_roots), checked where the data is read.
LOCAL_PROTOCOLS: Final = frozenset(
    {"local", "dir", "reference", "simplecache", "filecache", "blockcache", "cached", "memory"}
    | {"zip", "tar", "libarchive", "jlab", "jupyter", "sftp", "ssh", "smb", "git", "github"}
    # these open whatever filesystem the rest of the URL names, the server's own included
    | {"generic", "async_wrapper", "asyncwrapper"}
)
#: protocols whose connections are made by native code (pyarrow's libhdfs), where the node's
#: connection guard (data/destinations.py) cannot check where they go
UNCHECKED_PROTOCOLS: Final = frozenset({"hdfs", "arrow_hdfs"})
_SECRET_KEY_RE = re.compile(r"[A-Za-z0-9_.-]{1,253}")
_PATTERN_MAX = 256


@lru_cache(maxsize=64)
def _protocol_known(protocol: str) -> bool:
    """Whether fsspec knows the protocol (installed or not: the node says if it cannot load it)."""
    import fsspec

    return protocol in fsspec.available_protocols()


def source_protocol(url: str) -> str:
    scheme = urlsplit(url).scheme.lower()
    return "file" if scheme in ("", "file") else scheme


def _refused_host(url: str) -> str | None:
    """Why the URL's host, written as an address (IPv4-mapped IPv6 and old IPv4 forms
    included), is refused: link-local, cloud metadata. Names are checked where read, at
    every connection (data/destinations.py)."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return None
    return literal_refusal(host) if host else None


def _check_url(value: str) -> str:
    refused = _refused_host(value)
    if refused is not None:
        raise ValueError(refused)
    if "::" in value:
        raise ValueError("chained fsspec URLs (a::b) are not allowed")
    if any(ord(c) < 32 for c in value):
        raise ValueError("must not contain control characters")
    parts = urlsplit(value)
    if not parts.scheme:
        raise ValueError(f"must be a URL with a scheme like s3://bucket/path, got {value!r}")
    protocol = source_protocol(value)
    if protocol in LOCAL_PROTOCOLS:
        raise ValueError(f"protocol {protocol!r} is not allowed for datasets")
    if protocol in UNCHECKED_PROTOCOLS:
        raise ValueError(
            f"protocol {protocol!r} connects from native code, where its destinations cannot "
            "be checked: use webhdfs://"
        )
    if protocol == "file":
        if not parts.path.startswith("/") or parts.netloc:
            raise ValueError("a file:// URL must be absolute: file:///path")
    elif not _protocol_known(protocol):
        raise ValueError(f"unknown fsspec protocol {protocol!r}")
    elif protocol in ("s3", "s3a", "gs", "gcs", "az", "abfs") and not parts.netloc:
        raise ValueError(f"a {protocol}:// URL must name a bucket: {protocol}://bucket/path")
    return value


def _check_relative(value: list[str]) -> list[str]:
    for index, path in enumerate(value):
        parts = path.split("/")
        if not path or path.startswith("/") or ".." in parts or "\x00" in path:
            raise ValueError(f"entry {index}: must be a relative path without '..', got {path!r}")
        if len(path) > 1024:
            raise ValueError(f"entry {index}: longer than 1024 characters")
    return value


def _check_patterns(value: list[str]) -> list[str]:
    for index, pattern in enumerate(value):
        if not pattern or len(pattern) > _PATTERN_MAX or pattern.startswith("/"):
            raise ValueError(f"entry {index}: must be a relative glob like '*.parquet'")
    return value


def _check_size(value: str | None) -> str | None:
    if value is not None and parse_quantity(value) < 0:
        raise ValueError("must not be negative")
    return value


def _check_absolute(value: str) -> str:
    parts = value.split("/")
    if not value.startswith("/") or ".." in parts or "\x00" in value or len(value) > 1024:
        raise ValueError(f"must be an absolute path without '..', got {value!r}")
    if value.rstrip("/") == "":
        raise ValueError("must not be /")
    return value


def _check_endpoint(value: str | None) -> str | None:
    if value is not None and urlsplit(value).scheme not in ("http", "https"):
        raise ValueError(f"must be an http(s):// URL, got {value!r}")
    refused = _refused_host(value) if value is not None else None
    if refused is not None:
        raise ValueError(refused)
    return value


Url = Annotated[str, Field(min_length=1, max_length=2048), AfterValidator(_check_url)]
AbsolutePath = Annotated[str, AfterValidator(_check_absolute)]


class CacheMode(StrEnum):
    PINNED = "pinned"  # never evicted while the Dataset exists
    EVICTABLE = "evictable"


class CachePolicy(Model):
    """Where and how long the nodes keep the dataset."""

    #: node pools (the aipaas.dev/pool label) that may cache it; empty: any node
    pools: list[Name] = Field(default_factory=list, max_length=32)
    #: how many nodes prefetch keeps warm ahead of the queue (tasks still load where they run)
    replicas: int = Field(default=1, ge=0, le=64, strict=True)
    mode: CacheMode = CacheMode.EVICTABLE
    #: evicted after this long unused (None: kept until space is needed)
    ttl: PositiveDuration | None = None
    #: a task whose node's cache is cold reads the source itself (its URL and fsspec options
    #: in its environment) instead of waiting for the copy; False: it waits (data/stage.py)
    streaming: bool = Field(default=False, strict=True)


class DatasetSpec(Model):
    source: Url
    #: an S3-compatible server's URL (s3:// only); None: the protocol's default
    endpoint: str | None = Field(default=None, max_length=2048)
    #: a Secret of the same tenant holding the credentials
    secret_ref: Name | None = None
    sub_paths: Annotated[list[str], AfterValidator(_check_relative)] = Field(
        default_factory=list, max_length=256
    )
    include: Annotated[list[str], AfterValidator(_check_patterns)] = Field(
        default_factory=list, max_length=64
    )
    #: the declared size (the measured one is in the status once a node has read it)
    size: Annotated[QuantityStr | None, AfterValidator(_check_size)] = None
    cache: CachePolicy = Field(default_factory=CachePolicy)

    @field_validator("endpoint")
    @classmethod
    def _http_endpoint(cls, value: str | None) -> str | None:
        return _check_endpoint(value)

    def declared_bytes(self) -> int | None:
        return None if self.size is None else int(parse_quantity(self.size) // Decimal(1))


class NodeCacheStatus(LenientModel):
    node: str
    pool: str = ""
    bytes: int = 0
    complete: bool = False
    files: int = 0
    in_use: int = 0


class DatasetStatus(LenientModel):
    #: Pending (on no node), Loading, Cached (complete on a node), Failed (last load failed)
    phase: str = "Pending"
    size_bytes: int | None = None
    files: int | None = None
    nodes: list[NodeCacheStatus] = Field(default_factory=list)
    hits: int = 0
    misses: int = 0
    bytes_from_source: int = 0
    bytes_from_cache: int = 0
    message: str = ""
    #: the last on-demand warm request the controller carried out (annotation's value)
    warmed: str = ""


class Dataset(Object):
    plural: ClassVar[str] = "datasets"

    kind: Literal["Dataset"] = "Dataset"
    spec: DatasetSpec
    status: DatasetStatus | None = None


def _check_secret_data(value: dict[str, str]) -> dict[str, str]:
    if len(value) > 32:
        raise ValueError("at most 32 keys")
    for key, item in value.items():
        if not _SECRET_KEY_RE.fullmatch(key):
            raise ValueError(f"{key!r} is not a valid key (letters, digits, '-', '_', '.')")
        if len(item) > 16384:
            raise ValueError(f"the value of {key} is longer than 16384 characters")
    return value


REDACTED: Final = "***"


class SecretSpec(Model):
    """Credentials of a source. For s3: accessKeyId, secretAccessKey and optionally
    sessionToken; for other protocols the keys are passed to fsspec as storage options."""

    data: Annotated[dict[str, str], AfterValidator(_check_secret_data)] = Field(
        default_factory=dict
    )


class Secret(Object):
    plural: ClassVar[str] = "secrets"

    kind: Literal["Secret"] = "Secret"
    spec: SecretSpec

    def redacted(self) -> Secret:
        """The secret as the API shows it: its keys, never its values."""
        data = dict.fromkeys(self.spec.data, REDACTED)
        return self.model_copy(update={"spec": SecretSpec(data=data)})


class DatasetMount(Model):
    """A dataset a job's tasks read, seen at ``mountPath`` (read-only)."""

    name: Name
    mount_path: AbsolutePath
    read_only: Literal[True] = Field(
        default=True, description="datasets are read-only views; outputs go in spec.outputs"
    )
    #: the task starts only once the dataset is whole in its node's cache (the local backend
    #: always loads before starting; the sim and schedulers weigh it)
    require_warm: bool = Field(default=False, strict=True)


class OutputLocation(Model):
    """A directory the task writes (``path``), uploaded to ``destination`` when it ends:
    ``uploadOn: Success`` (the default) after an exit with code 0 only, ``Always`` at the end
    of every attempt, a failed or stopped one too (a stopped one within its grace period), so
    that what a failed attempt wrote (its checkpoints, its logs) is kept."""

    path: AbsolutePath
    destination: Url
    endpoint: Annotated[str | None, AfterValidator(_check_endpoint)] = Field(
        default=None, max_length=2048
    )
    secret_ref: Name | None = None
    # None (Success) rather than a default value, so that a job without it is written as before
    upload_on: Literal["Success", "Always"] | None = None


def check_mounts(value: list[DatasetMount] | None) -> list[DatasetMount] | None:
    """A job's ``spec.datasets``: each dataset and each path once, at most 16."""
    if value is None:
        return None
    if len(value) > 16:
        raise ValueError("at most 16 datasets")
    names = [m.name for m in value]
    paths = [m.mount_path.rstrip("/") for m in value]
    for index, (name, path) in enumerate(zip(names, paths, strict=True)):
        if names.index(name) != index:
            raise ValueError(f"entry {index}: dataset {name!r} is named twice")
        if paths.index(path) != index:
            raise ValueError(f"entry {index}: mountPath {path!r} is used twice")
    return value


DATA_KINDS: tuple[type[Object], ...] = (Dataset, Secret)
