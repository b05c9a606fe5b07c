"""Kinds by name, and loading objects from YAML or JSON with clear, bounded errors (the
parsing itself, bounded before any recursion, is api/parsing.py's).

Who calls it: the server (request bodies), the SDK and CLI (manifest files), the store (reading
stored blobs). Pure: no I/O beyond the text handed in.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import ValidationError

from aipaas.api.device_taints import TAINT_RULE_VERSIONS
from aipaas.api.devices import API_VERSION as DEVICE_API_VERSION
from aipaas.api.dra import DEVICE_KINDS, parse_device_kind
from aipaas.api.errors import invalid
from aipaas.api.job import Job
from aipaas.api.meta import API_VERSION, Object
from aipaas.api.more_kinds import MORE_KINDS
from aipaas.api.node import Node
from aipaas.api.parsing import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    MAX_DOCUMENTS,
    MAX_NODES,
    load_documents,
)
from aipaas.api.priority import PriorityClass
from aipaas.api.queue import Queue
from aipaas.api.tenancy import Tenant, User
from aipaas.errors import FieldError, InvalidObject

__all__ = [
    "KINDS",
    "MAX_DEPTH",
    "MAX_DOCUMENTS",
    "MAX_DOCUMENT_BYTES",
    "MAX_NODES",
    "check_depth",
    "iter_kinds",
    "load_documents",
    "load_objects",
    "parse_object",
    "resolve_kind",
]

_CORE_KINDS: tuple[type[Object], ...] = (Tenant, User, Queue, Job, Node, PriorityClass)
KINDS: dict[str, type[Object]] = {
    cls.model_fields["kind"].default: cls for cls in (*_CORE_KINDS, *MORE_KINDS)
}
KINDS.update(DEVICE_KINDS)

_ALIASES: dict[str, str] = {}
for _kind, _cls in KINDS.items():
    for _alias in (_kind, _kind.lower(), _cls.plural):
        _ALIASES[_alias] = _kind
_ALIASES.update({"claim": "ResourceClaim", "claims": "ResourceClaim"})


def resolve_kind(text: str) -> str:
    """``job``, ``jobs`` or ``Job`` -> ``Job``."""
    kind = _ALIASES.get(text) or _ALIASES.get(text.lower())
    if kind is None:
        raise InvalidObject(
            [FieldError("kind", f"unknown kind {text!r}; known kinds: {', '.join(KINDS)}")]
        )
    return kind


def parse_object(data: Any, *, index: int | None = None) -> Object:
    """Validate one object (a dict from YAML or JSON) into its kind's model."""
    where = f"document {index}" if index is not None else ""
    prefix = f"{where}: " if where else ""
    if not isinstance(data, dict):
        raise InvalidObject(
            [FieldError("", f"{prefix}an object must be a mapping, got {type(data).__name__}")]
        )
    check_depth(data)
    api_version = data.get("apiVersion")
    if api_version == DEVICE_API_VERSION or (
        api_version in TAINT_RULE_VERSIONS and data.get("kind") == "DeviceTaintRule"
    ):
        return parse_device_kind(data, where=where)
    if api_version != API_VERSION:
        raise InvalidObject(
            [
                FieldError(
                    "apiVersion",
                    f"{prefix}must be {API_VERSION!r} or {DEVICE_API_VERSION!r}, "
                    f"got {api_version!r}",
                )
            ]
        )
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise InvalidObject(
            [FieldError("kind", f"{prefix}unknown kind {kind!r}; known kinds: {', '.join(KINDS)}")]
        )
    try:
        return KINDS[kind].model_validate(data)
    except ValidationError as err:
        name = (
            data.get("metadata", {}).get("name") if isinstance(data.get("metadata"), dict) else None
        )
        what = f"{where + ' ' if where else ''}{kind} {name}" if name else f"{where} {kind}".strip()
        raise invalid(err, what=what) from err


def check_depth(data: Any, limit: int = MAX_DEPTH) -> None:
    """Refuse data nested deeper than ``limit`` (without recursion)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise InvalidObject([FieldError("", f"nested deeper than {limit} levels")])
        if isinstance(item, dict):
            stack.extend((value, depth + 1) for value in item.values())
        elif isinstance(item, list):
            stack.extend((value, depth + 1) for value in item)


def load_objects(text: str | bytes) -> list[Object]:
    return [parse_object(doc, index=i if i else None) for i, doc in enumerate(load_documents(text))]


def iter_kinds() -> Iterator[type[Object]]:
    return iter(KINDS.values())
