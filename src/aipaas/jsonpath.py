"""kubectl's JSONPath templates (`get -o jsonpath=...`, `wait --for=jsonpath=...`): text with
``{...}`` expressions; pure, for the CLI and the SDK.

Supported: ``{.a.b}``, ``{.items[0]}``, ``{.items[*].metadata.name}``, ``{.x['key/with.dots']}``,
``{.a.*}``, ``{.items[?(@.status.phase=="Running")].metadata.name}`` (== and != against a
string or number), ``{range .items[*]}...{end}``, ``{"\\n"}`` and ``{'\\t'}`` literals, ``@`` and
``$``. Several results of one expression are joined by spaces; a missing key gives nothing; a
map or list prints as JSON. A template without braces is read as one expression, as kubectl does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


class JsonPathError(ValueError):
    """The template cannot be read; the message says where."""


@dataclass(frozen=True)
class _Text:
    text: str


@dataclass(frozen=True)
class _Expr:
    path: str


@dataclass(frozen=True)
class _Range:
    path: str
    body: tuple[_Text | _Expr | _Range, ...]


Node = _Text | _Expr | _Range
_LITERAL = re.compile(r"""^\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')\s*$""")
_FILTER = re.compile(
    r"""^\?\(@((?:\.[\w-]+|\[-?\d+\])+)\s*(==|!=)\s*"""  # ?(@.path == or !=
    r"""(?:"([^"]*)"|'([^']*)'|(-?[\d.]+))\)$"""  # "text", 'text' or a number
)


def render(template: str, data: Any) -> str:
    """The template filled in from ``data``."""
    if "{" not in template:
        template = "{" + template + "}"
    nodes, rest = _parse(_split(template), 0, top=True)
    assert rest is None
    return "".join(_run(nodes, data))


def _split(template: str) -> list[tuple[str, str]]:
    """("text", ...) and ("expr", ...) pieces; a brace inside quotes does not end one."""
    pieces: list[tuple[str, str]] = []
    index = 0
    while index < len(template):
        start = template.find("{", index)
        if start < 0:
            pieces.append(("text", template[index:]))
            break
        if start > index:
            pieces.append(("text", template[index:start]))
        end, quote = start + 1, ""
        while end < len(template) and (quote or template[end] != "}"):
            char = template[end]
            if quote and char == "\\":
                end += 1
            elif char in "\"'":
                quote = "" if quote == char else (quote or char)
            end += 1
        if end >= len(template):
            raise JsonPathError(f"unclosed {{ at character {start + 1}")
        pieces.append(("expr", template[start + 1 : end].strip()))
        index = end + 1
    return pieces


def _parse(
    pieces: list[tuple[str, str]], at: int, *, top: bool
) -> tuple[tuple[Node, ...], int | None]:
    nodes: list[Node] = []
    while at < len(pieces):
        kind, text = pieces[at]
        at += 1
        if kind == "text":
            nodes.append(_Text(text))
        elif text == "end":
            if top:
                raise JsonPathError("{end} without {range}")
            return tuple(nodes), at
        elif text.startswith("range ") or text == "range":
            body, after = _parse(pieces, at, top=False)
            if after is None:
                raise JsonPathError("{range} without {end}")
            nodes.append(_Range(text[len("range") :].strip(), body))
            at = after
        else:
            literal = _LITERAL.match(text)
            if literal:
                raw = literal.group(1) if literal.group(1) is not None else literal.group(2)
                nodes.append(_Text(raw.encode().decode("unicode_escape")))
            else:
                nodes.append(_Expr(text))
    if not top:
        return tuple(nodes), None
    return tuple(nodes), None


def _run(nodes: tuple[Node, ...], data: Any) -> list[str]:
    out: list[str] = []
    for node in nodes:
        if isinstance(node, _Text):
            out.append(node.text)
        elif isinstance(node, _Expr):
            out.append(" ".join(_show(value) for value in evaluate(node.path, data)))
        else:
            for item in evaluate(node.path, data):
                out.extend(_run(node.body, item))
    return out


def _show(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def evaluate(path: str, data: Any) -> list[Any]:
    """Every value ``path`` selects in ``data`` (none when a key is missing)."""
    values = [data]
    for step in _steps(path):
        values = [found for value in values for found in _apply(step, value)]
    return values


def _steps(path: str) -> list[str]:
    text = path.strip()
    if text[:1] in ("@", "$"):
        text = text[1:]
    steps: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == ".":
            index += 1
            start = index
            name = []
            while index < len(text) and text[index] not in ".[":
                if text[index] == "\\" and index + 1 < len(text):
                    index += 1
                name.append(text[index])
                index += 1
            if index == start:
                raise JsonPathError(f"{path!r}: a name is missing after '.'")
            steps.append("." + "".join(name))
        elif char == "[":
            end = _closing(text, index, path)
            steps.append(text[index : end + 1])
            index = end + 1
        else:
            raise JsonPathError(f"{path!r}: unexpected {char!r} at character {index + 1}")
    return steps


def _closing(text: str, start: int, path: str) -> int:
    """The index of the ``]`` that closes the ``[`` at ``start`` (brackets nest in filters)."""
    quote, depth = "", 0
    for index in range(start, len(text)):
        char = text[index]
        if char in "\"'":
            quote = "" if quote == char else (quote or char)
        elif quote:
            continue
        elif char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return index
    raise JsonPathError(f"{path!r}: unclosed [")


def _apply(step: str, value: Any) -> list[Any]:
    if step.startswith("."):
        name = step[1:]
        if name == "*":
            return _all(value)
        return [value[name]] if isinstance(value, dict) and name in value else []
    inner = step[1:-1].strip()
    if inner == "*":
        return _all(value)
    if inner[:1] in "\"'" and inner[-1:] == inner[:1]:
        key = inner[1:-1]
        return [value[key]] if isinstance(value, dict) and key in value else []
    found = _FILTER.match(inner)
    if found:
        return [item for item in _all(value) if _matches(item, found)]
    if re.fullmatch(r"-?\d+", inner):
        if not isinstance(value, list):
            return []
        index = int(inner)
        return [value[index]] if -len(value) <= index < len(value) else []
    raise JsonPathError(f"[{inner}]: use [N], [*], ['key'] or [?(@.field==\"value\")]")


def _all(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return list(value)
    return []


def _matches(item: Any, found: re.Match[str]) -> bool:
    values = evaluate(found.group(1), item)
    wanted: Any = found.group(3) if found.group(3) is not None else found.group(4)
    if wanted is None:
        number = float(found.group(5))
        equal = any(isinstance(v, int | float) and v == number for v in values)
    else:
        equal = any(_show(v) == wanted for v in values)
    return equal if found.group(2) == "==" else not equal
