"""The device ledger's units: the devices held for one claim of a snapshot and the pods that
use them, and how a claim is keyed and where its devices can be reached."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aipaas.api.devices import ResourceClaim
from aipaas.devices.inventory import ALL_NODES
from aipaas.devices.picks import Pick


@dataclass
class Unit:
    """Devices held for one claim of this snapshot, and the owners (pods) that use it."""

    node: str
    picks: tuple[Pick, ...]
    consumers: list[str]


def shared_key(claim: ResourceClaim) -> str | None:
    return claim.metadata.uid or None


def reaches(unit: Unit, node: str) -> bool:
    return unit.node == node or all(p.device.node == ALL_NODES for p in unit.picks)


def where(selector: Mapping[str, Any]) -> str:
    """'node X' for the node selector an allocation carries, else a general phrase."""
    names = [
        value
        for term in selector.get("nodeSelectorTerms", []) or []
        for rule in term.get("matchFields", [])
        if rule.get("key") == "metadata.name"
        for value in rule.get("values", [])
    ]
    return f"node {', '.join(names)}" if names else "nodes this node is not among"
