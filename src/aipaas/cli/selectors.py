"""Label selectors (`-l`) and the filters of `get`, `cancel` and `delete` (`--phase`,
`--queue`), applied to objects as the API answers them.

Selector grammar, as kubectl's: requirements separated by commas, all of which must hold:
``key=value`` (or ``==``), ``key!=value`` (true also when the label is absent), ``key``
(present), ``!key`` (absent), ``key in (a,b)``, ``key notin (a,b)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

_KEY = r"(?:[a-z0-9.-]{1,253}/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s+\(([^)]*)\)$")
_COMPARE = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*({_VALUE})$")
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")


class SelectorError(ValueError):
    """A selector or filter that cannot be read; the message names the part."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def holds(self, labels: dict[str, str]) -> bool:
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "!exists":
            return self.key not in labels
        if self.operator == "in":
            return self.key in labels and labels[self.key] in self.values
        return labels.get(self.key) not in self.values  # notin / != hold when it is absent


def parse_selector(text: str) -> list[Requirement]:
    """The requirements of ``text``; SelectorError naming the part that is wrong."""
    requirements = []
    for part in _split(text):
        part = part.strip()
        if not part:
            raise SelectorError(f"selector {text!r}: an empty requirement")
        found = _SET.match(part)
        if found:
            values = frozenset(v.strip() for v in found.group(3).split(",") if v.strip())
            requirements.append(Requirement(found.group(1), found.group(2), values))
            continue
        found = _COMPARE.match(part)
        if found:
            operator = "notin" if found.group(2) == "!=" else "in"
            requirements.append(Requirement(found.group(1), operator, frozenset({found.group(3)})))
            continue
        found = _EXISTS.match(part)
        if found:
            operator = "!exists" if found.group(1) else "exists"
            requirements.append(Requirement(found.group(2), operator))
            continue
        raise SelectorError(
            f"selector {text!r}: cannot read {part!r} (use key=value, key!=value, key, !key, "
            "key in (a,b), key notin (a,b))"
        )
    return requirements


def _split(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def matches(requirements: Iterable[Requirement], obj: dict[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(requirement.holds(labels) for requirement in requirements)


def phase_of(obj: dict[str, Any]) -> str:
    """The object's phase; a job with no status yet is Pending."""
    phase = (obj.get("status") or {}).get("phase")
    if phase:
        return str(phase)
    return "Pending" if obj.get("kind") == "Job" else ""


def make_filter(
    selector: str | None, phases: str | None, queues: str | None
) -> Callable[[dict[str, Any]], bool]:
    """One test from `-l`, `--phase` (comma-separated, any case) and `--queue`
    (comma-separated)."""
    requirements = parse_selector(selector) if selector else []
    wanted_phases = {p.strip().lower() for p in phases.split(",")} if phases else None
    wanted_queues = {q.strip() for q in queues.split(",")} if queues else None

    def keep(obj: dict[str, Any]) -> bool:
        if requirements and not matches(requirements, obj):
            return False
        if wanted_phases is not None and phase_of(obj).lower() not in wanted_phases:
            return False
        if wanted_queues is not None:
            queue = (obj.get("spec") or {}).get("queue")
            if queue not in wanted_queues:
                return False
        return True

    return keep


def filtering(selector: str | None, phases: str | None, queues: str | None) -> bool:
    return bool(selector or phases or queues)
