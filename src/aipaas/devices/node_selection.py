"""Kubernetes NodeSelectors over a node's name and labels (slices published for some nodes).

Who calls it: the inventory (which nodes see a slice's devices). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["node_matches"]


def node_matches(selector: Mapping[str, Any] | None, node: str, labels: Mapping[str, str]) -> bool:
    """A Kubernetes NodeSelector: any term matches when all its expressions and fields do."""
    if not selector:
        return False
    for term in selector.get("nodeSelectorTerms", []):
        expressions = term.get("matchExpressions", [])
        fields = term.get("matchFields", [])
        if not expressions and not fields:
            continue
        if all(_requirement(e, labels) for e in expressions) and all(
            _requirement(f, {"metadata.name": node}) for f in fields
        ):
            return True
    return False


def _requirement(rule: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key, operator = rule.get("key", ""), rule.get("operator", "")
    wanted = [str(v) for v in rule.get("values", [])]
    present = key in values
    value = values.get(key, "")
    if operator == "In":
        return present and value in wanted
    if operator == "NotIn":
        return not present or value not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            number, bound = int(value), int(wanted[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False
