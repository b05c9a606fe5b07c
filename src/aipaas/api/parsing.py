"""Bounded parsing of request bodies and manifests: YAML (any number of documents) or JSON.

Who calls it: api/registry.py (``load_documents``), for the server, the SDK and the CLI. Pure.

Nothing recursive runs before the text is known to be shallow. libyaml's composer (and PyYAML's
constructor) recurse once per level of nesting with no bound of their own: about 60 KB of
``[[[[...`` overflowed the C stack and killed the server. So the YAML text is first walked as
libyaml's flat stream of events (an explicit stack, no recursion), which refuses, naming the path:
nesting deeper than ``MAX_DEPTH``, more than ``MAX_NODES`` nodes with aliases expanded (a
"billion laughs"), more than ``MAX_DOCUMENTS`` documents, any tag but the plain ``!!str``,
``!!seq`` and ``!!map`` (no ``!!binary``, ``!!python/...``, ``!!timestamp`` or custom tags), keys
that are lists or mappings, and integers longer than Python converts. Only then is it loaded, by
the safe loader with timestamps kept as text. JSON's brackets are counted level by level before
``json.loads``; its duplicate keys, ``NaN`` and infinities are refused, as YAML's are. A refused
JSON number or nesting is named by its path too, found by a second walk after the refusal only.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import yaml

from aipaas.api.yaml_errors import yaml_error_line
from aipaas.errors import FieldError, InvalidObject, PayloadTooLarge

MAX_DOCUMENT_BYTES: Final = 1 << 20
MAX_DEPTH: Final = 32
MAX_NODES: Final = 100_000  # in one document, aliases expanded
MAX_TOTAL_NODES: Final = 500_000  # in the whole text, aliases expanded
MAX_DOCUMENTS: Final = 1000
# Python refuses to turn a decimal text of more than 4300 digits into an int, and YAML 1.1's
# base-60 numbers (``1:20:30``) take quadratic time: no count or size needs that many.
MAX_NUMBER_CHARS: Final = 1000

_STR, _SEQ, _MAP = (f"tag:yaml.org,2002:{name}" for name in ("str", "seq", "map"))
# None: no tag; "!": the non-specific tag, which makes a scalar a string.
_PLAIN_TAGS: Final = frozenset({None, "!", _STR, _SEQ, _MAP})
_TIMESTAMP: Final = "tag:yaml.org,2002:timestamp"
_MERGE: Final = "tag:yaml.org,2002:merge"
_NUMBER_TAGS: Final = frozenset({"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"})
# YAML 1.1's NaN and infinities as plain scalars (what the safe loader reads as such).
_NON_FINITE: Final = re.compile(r"[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")
_JSON_STRING: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
# A key (a JSON string or a bare word, then a colon), a string, or a bracket or comma.
_JSON_TOKEN: Final = re.compile(
    r'(?P<key>"[^"\\]*(?:\\.[^"\\]*)*")\s*:|"[^"\\]*(?:\\.[^"\\]*)*"'
    r'|(?P<bare>[^\s"\[\]{},:]+)\s*:|(?P<bracket>[\[\]{},])'
)
_JSON_INNERMOST: Final = re.compile(r"\[[^\[\]{}]*\]|\{[^\[\]{}]*\}")
_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: several times faster


def load_documents(text: str | bytes) -> list[Any]:
    """Parse multi-document YAML (or JSON) safely: bounded size, depth, nodes and aliases."""
    if len(text) > MAX_DOCUMENT_BYTES:
        raise PayloadTooLarge(f"manifest is {len(text)} bytes; the limit is {MAX_DOCUMENT_BYTES}")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InvalidObject([FieldError("", f"not UTF-8: {err}")]) from err
    if text.lstrip().startswith("{"):
        try:
            return [load_json(text)]  # JSON, the SDK's wire form: no aliases, a fast parser
        except _NotJson as err:
            # YAML's flow style (``{apiVersion: aipaas/v1, kind: Queue}``) starts the same way:
            # read as YAML; when that fails too, JSON's complaint is the one to show.
            try:
                return _load_yaml(text)
            except InvalidObject:
                raise err from None
    return _load_yaml(text)


def _load_yaml(text: str) -> list[Any]:
    scan_yaml(text)
    try:
        return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc is not None]
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as err:
        # The scan leaves only scalars that do not fit their implicit type (``.nan``, a bad
        # merge key): still the sender's text, so a 422, never a 500.
        problem = yaml_error_line(err) if isinstance(err, yaml.YAMLError) else str(err)
        raise InvalidObject([FieldError("", f"not valid YAML: {problem}")]) from err


# --- JSON -----------------------------------------------------------------------------------


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key


class _NotJson(InvalidObject):
    """The text is no JSON at all (``load_documents`` then tries it as YAML)."""


class _PairsWithDuplicate(dict[str, Any]):
    """An object whose ``duplicate`` key was given twice (the path finder's marker)."""

    duplicate: str = ""


def load_json(text: str) -> Any:
    """One JSON value; duplicate keys, NaN, infinities and deep nesting refused."""
    check_json_depth(text)
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique_pairs,
            parse_constant=_no_constant,
            parse_float=_finite_float,
        )
    except _DuplicateKey as err:
        path = _duplicate_path(text) or err.key
        raise InvalidObject([FieldError(path, "key given twice in one object")]) from err
    except (ValueError, RecursionError) as err:
        refused = _refused_number(text)
        if refused is not None:
            raise InvalidObject([refused]) from err
        raise _NotJson([FieldError("", f"not valid JSON: {err}")]) from err


def _duplicate_path(text: str) -> str | None:
    """The path of the first key given twice in one object of a JSON text (``metadata.name``,
    not ``name``); only after a refusal, as ``_refused_number``."""

    def pairs(found: list[tuple[str, Any]]) -> dict[str, Any]:
        mapping = _PairsWithDuplicate(found)
        if len(mapping) != len(found):
            seen: set[str] = set()
            for key, _value in found:
                if key in seen and not mapping.duplicate:
                    mapping.duplicate = key
                seen.add(key)
        return mapping

    try:
        value = json.loads(text, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return None
    return _find_duplicate(value, "")


def _find_duplicate(value: Any, path: str) -> str | None:
    """Depth-first, in document order (the depth was checked: at most ``MAX_DEPTH`` calls)."""
    if isinstance(value, _PairsWithDuplicate) and value.duplicate:
        return f"{path}.{value.duplicate}" if path else value.duplicate
    if isinstance(value, dict):
        items: Any = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for inner_path, inner in items:
        found = _find_duplicate(inner, inner_path)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class _Refused:
    """A number JSON may carry but this API does not, kept in place to find its path."""

    reason: str


def _refused_number(text: str) -> FieldError | None:
    """The first refused number of a JSON text (NaN, an infinity, out of range, too long),
    named by its path; None when the text fails for another reason. Only after a failure:
    the fast parse knows no paths, and this one walks the whole value."""
    try:
        value = json.loads(
            text,
            object_pairs_hook=dict,
            parse_constant=lambda name: _Refused(f"{name} is not a number this API accepts"),
            parse_float=lambda t: (
                _Refused(f"{t} is out of range") if not math.isfinite(float(t)) else 0.0
            ),
            parse_int=lambda t: (
                _Refused(f"a number of more than {MAX_NUMBER_CHARS} characters")
                if len(t) > MAX_NUMBER_CHARS
                else 0
            ),
        )
    except (ValueError, RecursionError):
        return None
    found = _find_refused(value, "")
    return None if found is None else FieldError(found[0], found[1].reason)


def _find_refused(value: Any, path: str) -> tuple[str, _Refused] | None:
    """Depth-first, in document order (the depth was checked: at most ``MAX_DEPTH`` calls)."""
    if isinstance(value, _Refused):
        return path, value
    if isinstance(value, dict):
        items: Any = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for inner_path, inner in items:
        found = _find_refused(inner, inner_path)
        if found is not None:
            return found
    return None


def check_json_depth(text: str) -> None:
    """Refuse JSON nested deeper than ``MAX_DEPTH``, in at most ``MAX_DEPTH + 1`` passes of a
    regular expression (each removes the innermost level): no recursion, no per-character loop
    in Python."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return  # cannot nest that deep
    rest = _JSON_STRING.sub("0", text)  # brackets inside strings do not nest
    for _level in range(MAX_DEPTH + 1):
        rest, removed = _JSON_INNERMOST.subn("0", rest)
        if not removed:
            return  # what is left is either flat or unbalanced: json.loads says which
    if any(bracket in rest for bracket in "[]{}"):
        raise InvalidObject(
            [FieldError(_too_deep_at(text), f"nested deeper than {MAX_DEPTH} levels")]
        )


def _too_deep_at(text: str) -> str:
    """The path of the first list or object nested deeper than ``MAX_DEPTH`` (only once the
    text is known to be: a walk of its tokens, stopped there, with no recursion). Keys may be
    JSON strings or bare words (``{a: {a: ...``, which is YAML's flow style, not JSON)."""
    stack: list[list[Any]] = []  # per open bracket: [is an object, path, next index, key]
    for token in _JSON_TOKEN.finditer(text):
        string, bare, bracket = token.group("key"), token.group("bare"), token.group("bracket")
        frame = stack[-1] if stack else None
        if string is not None or bare is not None:
            if frame is not None and frame[0]:
                frame[3] = string[1:-1] if string is not None else bare  # escapes as sent
        elif bracket is None:
            continue  # a string value: no key, no bracket
        elif bracket in "[{":
            if frame is None:
                path = ""
            elif frame[0]:
                path = f"{frame[1]}.{frame[3]}" if frame[1] else str(frame[3])
            else:
                path = f"{frame[1]}[{frame[2]}]"
            if len(stack) > MAX_DEPTH:
                return path
            stack.append([bracket == "{", path, 0, ""])
        elif bracket == "," and frame is not None and not frame[0]:
            frame[2] += 1
        elif bracket in "]}" and stack:
            stack.pop()
    return ""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return mapping


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number this API accepts")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


# --- YAML: the scan ---------------------------------------------------------------------------


@dataclass
class _Frame:
    """One open sequence or mapping in the event stream."""

    is_map: bool
    path: str
    depth: int
    anchor: str | None
    nodes_before: int  # the document's node count when this collection opened
    deepest: int  # the deepest level reached inside it so far, aliases expanded
    index: int = 0  # sequences: the next item's index
    expect_key: bool = True  # mappings: is the next node a key?
    key: str = ""  # mappings: the current value's key
    keys: set[tuple[str, bool]] = field(default_factory=set)  # mappings: (text, plain) seen


@dataclass
class _Anchor:
    nodes: int
    height: int  # levels below the anchored node, aliases expanded
    is_collection: bool


@dataclass
class _Scan:
    frames: list[_Frame] = field(default_factory=list)
    anchors: dict[str, _Anchor] = field(default_factory=dict)
    documents: int = 0
    nodes: int = 0  # in this document, aliases expanded
    total: int = 0  # in the whole text

    def where(self) -> str:
        """The path of the node about to start."""
        if not self.frames:
            return ""
        frame = self.frames[-1]
        if not frame.is_map:
            return f"{frame.path}[{frame.index}]"
        if frame.expect_key:
            return frame.path
        return f"{frame.path}.{frame.key}" if frame.path else frame.key

    def refuse(self, reason: str, path: str | None = None) -> InvalidObject:
        prefix = f"document {self.documents - 1}: " if self.documents > 1 else ""
        return InvalidObject([FieldError(self.where() if path is None else path, prefix + reason)])

    def in_key(self) -> bool:
        return bool(self.frames) and self.frames[-1].is_map and self.frames[-1].expect_key

    def count(self, nodes: int, height: int) -> None:
        """Add a node (or an alias's expansion) at the current level."""
        self.nodes += nodes
        self.total += nodes
        if self.nodes > MAX_NODES or self.total > MAX_TOTAL_NODES:
            limit = MAX_NODES if self.nodes > MAX_NODES else MAX_TOTAL_NODES
            # Named where the count went over: the field that made the document too big.
            raise self.refuse(f"expands to more than {limit} nodes (a YAML bomb?)")
        depth = len(self.frames) + height
        if depth > MAX_DEPTH:
            raise self.refuse(f"nested deeper than {MAX_DEPTH} levels")
        if self.frames and depth > self.frames[-1].deepest:
            self.frames[-1].deepest = depth

    def done(self, key: tuple[str, bool] | None = None) -> None:
        """A node is complete: move its parent on to the next key, value or item. A scalar
        key given twice in one mapping is refused here, where its path is known (``<<``, a
        merge, may be overridden; the loader also compares keys by value: ``1`` and ``01``)."""
        if not self.frames:
            return
        frame = self.frames[-1]
        if not frame.is_map:
            frame.index += 1
        elif frame.expect_key:
            frame.key = key[0] if key is not None else "?"
            frame.expect_key = False
            if key is not None and key != ("<<", True):
                if key in frame.keys:
                    raise self.refuse(f"key {key[0]!r} given twice in one mapping")
                frame.keys.add(key)
        else:
            frame.expect_key = True


def scan_yaml(text: str) -> None:
    """Walk the event stream of ``text`` and refuse what ``load_documents``'s docstring lists;
    builds no objects and does not recurse."""
    scan = _Scan()
    try:
        for event in yaml.parse(text, Loader=_BASE_LOADER):
            _step(scan, event)
    except yaml.YAMLError as err:
        raise InvalidObject([FieldError("", f"not valid YAML: {yaml_error_line(err)}")]) from err


def _step(scan: _Scan, event: yaml.Event) -> None:
    if isinstance(event, yaml.DocumentStartEvent):
        scan.documents += 1
        if scan.documents > MAX_DOCUMENTS:
            raise scan.refuse(f"more than {MAX_DOCUMENTS} documents", "")
        scan.nodes, scan.anchors = 0, {}
    elif isinstance(event, yaml.ScalarEvent):
        _check_tag(scan, event)
        value: str = event.value
        if event.implicit[0] and len(value) > MAX_NUMBER_CHARS and _is_number(value):
            raise scan.refuse(f"a number of more than {MAX_NUMBER_CHARS} characters")
        if event.implicit[0] and _NON_FINITE.fullmatch(value):
            raise scan.refuse(f"{value!r} is not a finite number")
        scan.count(1, 0)
        if event.anchor:
            scan.anchors[event.anchor] = _Anchor(1, 0, False)
        scan.done((value, bool(event.implicit[0])))
    elif isinstance(event, yaml.CollectionStartEvent):
        _check_tag(scan, event)
        if scan.in_key():
            raise scan.refuse("a key must be a plain value, not a list or a mapping")
        path = scan.where()
        scan.count(1, 0)
        depth = len(scan.frames)
        is_map = isinstance(event, yaml.MappingStartEvent)
        scan.frames.append(_Frame(is_map, path, depth, event.anchor, scan.nodes, depth))
    elif isinstance(event, yaml.CollectionEndEvent):
        frame = scan.frames.pop()
        if frame.anchor:
            nodes = scan.nodes - frame.nodes_before + 1
            scan.anchors[frame.anchor] = _Anchor(nodes, frame.deepest - frame.depth, True)
        if scan.frames and frame.deepest > scan.frames[-1].deepest:
            scan.frames[-1].deepest = frame.deepest
        scan.done()
    elif isinstance(event, yaml.AliasEvent):
        anchor = scan.anchors.get(event.anchor or "")
        if anchor is None:
            raise scan.refuse(f"unknown alias *{event.anchor}")
        if anchor.is_collection and scan.in_key():
            raise scan.refuse("a key must be a plain value, not a list or a mapping")
        scan.count(anchor.nodes, anchor.height)
        scan.done()


def _check_tag(scan: _Scan, event: yaml.NodeEvent) -> None:
    tag = getattr(event, "tag", None)
    if tag in _PLAIN_TAGS:
        return
    raise scan.refuse(f"YAML tag {tag!r} is not accepted (only plain values, lists and mappings)")


def _is_number(plain: str) -> bool:
    """Would the safe loader read this plain scalar as an int or a float?"""
    tag: str = _RESOLVER.resolve(yaml.ScalarNode, plain, (True, False))  # type: ignore[no-untyped-call]
    return tag in _NUMBER_TAGS


# --- YAML: the loader ---------------------------------------------------------------------------


class _Loader(_BASE_LOADER):  # type: ignore[misc]
    """The safe loader, refusing a key given twice in one mapping (YAML says it is an error;
    PyYAML would silently keep the last), refusing NaN and infinities, and keeping dates as the
    text they were (a date object is no wire value, and ``2001-13-45`` would not construct)."""

    yaml_implicit_resolvers: ClassVar[dict[str, list[tuple[str, re.Pattern[str]]]]] = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
        for first, resolvers in _BASE_LOADER.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _value in node.value:
            if key_node.tag == _MERGE:
                continue  # ``<<: *base``: its keys may be overridden here, which is no duplicate
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

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        value: float = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value!r} is not a finite number", node.start_mark
            )
        return value


_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)
_RESOLVER: Final = yaml.resolver.Resolver()
