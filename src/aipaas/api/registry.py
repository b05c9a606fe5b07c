"""Kinds by name, and loading objects from YAML or JSON with clear, bounded errors.

Who calls it: the server (request bodies), the SDK and CLI (manifest files), the store (reading
stored blobs). Pure: no I/O beyond the text handed in.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import yaml
from pydantic import ValidationError

from aipaas.api.devices import API_VERSION as DEVICE_API_VERSION
from aipaas.api.dra import DEVICE_KINDS, parse_device_kind
from aipaas.api.errors import invalid
from aipaas.api.job import Job
from aipaas.api.meta import API_VERSION, Object
from aipaas.api.node import Node
from aipaas.api.queue import Queue
from aipaas.api.tenancy import Tenant, User
from aipaas.errors import FieldError, InvalidObject, PayloadTooLarge

# libyaml's safe loader when present (several times faster), else the pure-Python one.
_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BASE_LOADER):  # type: ignore[misc]
    """The safe loader, refusing a key given twice in one mapping (YAML says it is an error;
    PyYAML would silently keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


_LOADER: Any = _Loader
KINDS: dict[str, type[Object]] = {
    cls.model_fields["kind"].default: cls for cls in (Tenant, User, Queue, Job, Node)
}
KINDS.update(DEVICE_KINDS)
MAX_DOCUMENT_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_NODES = 100_000
MAX_DOCUMENTS = 1000

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
    if api_version == DEVICE_API_VERSION:
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


def load_documents(text: str | bytes) -> list[Any]:
    """Parse multi-document YAML (or JSON) safely: bounded size, depth and alias expansion."""
    if len(text) > MAX_DOCUMENT_BYTES:
        raise PayloadTooLarge(f"manifest is {len(text)} bytes; the limit is {MAX_DOCUMENT_BYTES}")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InvalidObject([FieldError("", f"not UTF-8: {err}")]) from err
    if text.lstrip().startswith("{"):
        return [_load_json(text)]  # JSON, the SDK's wire form: no aliases, a fast parser
    try:
        roots = list(yaml.compose_all(text, Loader=_LOADER))
    except yaml.YAMLError as err:
        raise InvalidObject([FieldError("", f"not valid YAML: {err}")]) from err
    if len(roots) > MAX_DOCUMENTS:
        raise InvalidObject([FieldError("", f"more than {MAX_DOCUMENTS} documents")])
    for root in roots:
        _check_expanded_size(root)
    try:
        documents = [doc for doc in yaml.load_all(text, Loader=_LOADER) if doc is not None]
    except yaml.YAMLError as err:
        raise InvalidObject([FieldError("", f"not valid YAML: {err}")]) from err
    return documents


def _load_json(text: str) -> Any:
    try:
        document = json.loads(text)
    except RecursionError as err:
        raise InvalidObject([FieldError("", f"nested deeper than {MAX_DEPTH} levels")]) from err
    except ValueError as err:
        raise InvalidObject([FieldError("", f"not valid JSON: {err}")]) from err
    if text.count("{") + text.count("[") > MAX_DEPTH:  # else it cannot nest that deep
        check_depth(document)
    return document


def load_objects(text: str | bytes) -> list[Object]:
    return [parse_object(doc, index=i if i else None) for i, doc in enumerate(load_documents(text))]


def _check_expanded_size(root: yaml.Node | None) -> None:
    """Count nodes as if aliases were expanded: a 'billion laughs' document fails fast."""
    if root is None:
        return
    seen = 0
    stack: list[tuple[yaml.Node, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise InvalidObject(
                [FieldError("", f"document expands to more than {MAX_NODES} nodes (YAML bomb?)")]
            )
        if depth > MAX_DEPTH:
            raise InvalidObject([FieldError("", f"nested deeper than {MAX_DEPTH} levels")])
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, depth + 1) for item in node.value)


def iter_kinds() -> Iterator[type[Object]]:
    return iter(KINDS.values())
