"""Label and field selectors as the Kubernetes API reads them, for the fake API server.

Labels: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, ``a in (x,y)``, ``a notin (x,y)``, joined by
commas. Fields: ``path=value`` and ``path!=value`` on dotted paths (``spec.schedulerName``).
"""

from __future__ import annotations

import re
from typing import Any

_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split(selector: str) -> list[str]:
    """Commas inside ``(...)`` belong to a set term."""
    terms, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        terms.append(current)
    return [t.strip() for t in terms if t.strip()]


def _term(values: dict[str, str], term: str) -> bool:
    found = _SET.match(term)
    if found:
        key, op, items = found.groups()
        options = {i.strip() for i in items.split(",")}
        return (values.get(key) in options) if op == "in" else (values.get(key) not in options)
    if "!=" in term:
        key, value = term.split("!=", 1)
        return values.get(key.strip()) != value.strip()
    if "=" in term:
        key, value = term.replace("==", "=").split("=", 1)
        return values.get(key.strip()) == value.strip()
    if term.startswith("!"):
        return term[1:].strip() not in values
    return term in values


def labels_match(obj: dict[str, Any], selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(_term(labels, term) for term in _split(selector))


def _field(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def fields_match(obj: dict[str, Any], selector: str) -> bool:
    for term in _split(selector):
        if "!=" in term:
            path, value = term.split("!=", 1)
            if _field(obj, path.strip()) == value.strip():
                return False
        else:
            path, value = term.replace("==", "=").split("=", 1)
            if _field(obj, path.strip()) != value.strip():
                return False
    return True
