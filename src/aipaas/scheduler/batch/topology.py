"""Topology for gangs (item 6 of issue 11): a whole gang inside one domain of a level.

A level is a node-label key (``topology.aipaas.dev/rack``); its domains are the nodes grouped
by that label's value (a node without the label belongs to none). A required level places the
gang in the fullest domain that can hold it (least free GPU, then CPU, ties by name), which
keeps big domains whole for big gangs; a preferred level does the same and falls back to
anywhere. When no domain can, the job waits with reason Topology and numbers.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.explain import amount, unschedulable_message
from aipaas.scheduler.batch.model import Job, Node, Resources
from aipaas.scheduler.framework.types import Placement, PodRequest, Unschedulable

if TYPE_CHECKING:
    from aipaas.scheduler.batch.cluster import PlacementEngine


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a placement failed: ``reason`` is "Topology" or "Unschedulable"."""

    reason: str
    message: str


def level_name(label: str) -> str:
    """The level's short name: the label key's part after the last '/' or '.'."""
    return label.rsplit("/", 1)[-1].rsplit(".", 1)[-1]


def domains(nodes: Sequence[Node], label: str) -> dict[str, list[str]]:
    """Node names per value of ``label``, in node order."""
    out: dict[str, list[str]] = {}
    for node in nodes:
        value = node.labels.get(label)
        if value is not None:
            out.setdefault(value, []).append(node.name)
    return out


def _gang_size(pods: Sequence[PodRequest]) -> Resources:
    total = Resources()
    for pod in pods:
        total = total + Resources.of_pod(pod)
    return total


def _free(engine: PlacementEngine, names: Sequence[str]) -> Resources:
    total = Resources()
    for name in names:
        total = total + engine.free(name)
    return total


def _size_words(gang: Resources) -> tuple[str, int]:
    """('4-GPU', index of the resource the numbers speak of) for the message."""
    if gang.gpu_milli:
        return f"{amount(gang.gpu_milli, 1000)}-GPU", 0
    return f"{amount(gang.cpu_milli, 1000)}-CPU", 1


def place_in_domain(
    engine: PlacementEngine,
    pods: Sequence[PodRequest],
    label: str,
    allowed: Collection[str] | None,
    *,
    required: bool,
) -> list[Placement] | Refusal:
    """Place all ``pods`` inside one domain of ``label`` (on ``allowed`` nodes only, when
    given); with ``required`` False, anywhere when no domain can hold them."""
    gang = _gang_size(pods)
    level = level_name(label)
    candidates = []
    largest = 0
    words, index = _size_words(gang)
    for value, names in domains(engine.nodes, label).items():
        usable = [n for n in names if allowed is None or n in allowed]
        if not usable:
            continue
        free = _free(engine, usable)
        largest = max(largest, free.as_tuple()[index])
        if gang.fits_within(Resources(free.gpu_milli, free.cpu_milli, free.memory_mib, 2**62)):
            candidates.append((free.gpu_milli, free.cpu_milli, value, usable))
    candidates.sort(key=lambda c: (c[0], c[1], c[2]))
    last: Unschedulable | None = None
    for _, _, _, usable in candidates:
        result = engine.place(pods, nodes=usable)
        if not isinstance(result, Unschedulable):
            return result
        last = result
    if not required:
        anywhere = engine.place(pods, nodes=allowed)
        if isinstance(anywhere, Unschedulable):
            return Refusal("Unschedulable", unschedulable_message(anywhere, len(pods)))
        return anywhere
    message = f"waiting for a {words} gang inside one {level}; the largest free {level} has "
    message += amount(largest, 1000)
    if not domains(engine.nodes, label):
        message = f"waiting for a {words} gang inside one {level}; no node has the label {label}"
    elif last is not None:
        message += f" and no {level} with that much free fits its tasks ({'; '.join(last.reasons)})"
    return Refusal("Topology", message)


def job_domain(engine: PlacementEngine, job: Job, label: str) -> list[str] | None:
    """The nodes of the domain the job's running tasks are in (None when they run in none or
    in several): where its elastic extras go."""
    by_node = {n.name: n.labels.get(label) for n in engine.nodes}
    values = {by_node.get(t.placement.node) for t in job.tasks if t.placement is not None}
    if len(values) != 1:
        return None
    (value,) = values
    if value is None:
        return None
    return domains(engine.nodes, label).get(value)


def ever_fits(nodes: Sequence[Node], label: str, gang: Resources) -> bool:
    """Some domain of ``label`` offers, empty, at least what the gang needs."""
    for names in domains(nodes, label).values():
        members = [n for n in nodes if n.name in set(names)]
        room = Resources(
            sum(n.gpu_count for n in members) * 1000,
            sum(n.cpu_milli for n in members),
            sum(n.memory_mib for n in members),
            2**62,
        )
        if gang.fits_within(room):
            return True
    return False
