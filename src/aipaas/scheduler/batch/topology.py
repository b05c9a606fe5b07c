"""Topology for gangs: a whole gang inside one domain of a level, packed as Kueue packs it.

A level is a node-label key (``topology.aipaas.dev/rack``); its domains are the nodes grouped
by that label's value (a node without the label belongs to none). The levels above it are the
keys under the same prefix whose domains are unions of its domains (a block above a rack); the
levels below, the keys under the prefix that split its domains; the node is the last level.

A gang of like pods (no DRA claims) is placed as Kueue's topology-aware scheduling places a
pod set (``topology_tas``): the domain of the asked level that holds the gang with the least
room to spare, then inside it the fewest domains of each lower level and the fewest nodes, the
last of each the fullest that still holds the rest. A preferred level that no domain can hold
falls back to the coarser levels in turn, and at the coarsest to the fewest of its domains,
then to anywhere. Other gangs (pods of several shapes, claims) go to the fullest domain that
holds them and are placed there by the profile. When no domain of a required level can, the
job waits with reason Topology and numbers.

Who calls it: the allocate and backfill actions (through ``Placer`` in actions/starting.py).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from aipaas.scheduler.batch.explain import amount, unschedulable_message
from aipaas.scheduler.batch.model import Job, Node, Resources
from aipaas.scheduler.batch.topology_tas import assign, build_domains
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


class DomainView:
    """Domains per level and their free capacity, remembered while the cluster stays as it
    was (``version``: the caller's count of changes, the session's ``len(account_log)``):
    a backlog of topology gangs costs one walk over the nodes per change, not per job."""

    def __init__(self, engine: PlacementEngine) -> None:
        self.engine = engine
        self._groups: dict[str, dict[str, list[str]]] = {}
        self._coarser: dict[str, list[str]] = {}
        self._finer: dict[str, list[str]] = {}
        self._free: dict[tuple[str, ...], Resources] = {}
        self._version: int | None = None

    def finer(self, label: str) -> list[str]:
        """The levels below ``label``, coarser first (see ``finer_levels``)."""
        found = self._finer.get(label)
        if found is None:
            found = self._finer[label] = finer_levels(self.engine.nodes, label)
        return found

    def coarser(self, label: str) -> list[str]:
        """The levels above ``label``, finer first (see ``coarser_levels``)."""
        found = self._coarser.get(label)
        if found is None:
            found = self._coarser[label] = coarser_levels(self.engine.nodes, label)
        return found

    def groups(self, label: str) -> dict[str, list[str]]:
        found = self._groups.get(label)
        if found is None:
            found = self._groups[label] = domains(self.engine.nodes, label)
        return found

    def free(self, names: Sequence[str], version: int | None) -> Resources:
        if version is None or version != self._version:
            self._free.clear()
            self._version = version
        key = tuple(names)
        total = self._free.get(key)
        if total is None:
            gpu = cpu = memory = 0
            for name in names:
                room = self.engine.free(name)
                gpu += room.gpu_milli
                cpu += room.cpu_milli
                memory += room.memory_mib
            total = Resources(gpu, cpu, memory)
            if version is not None:
                self._free[key] = total
        return total


def coarser_levels(nodes: Sequence[Node], label: str) -> list[str]:
    """The label keys under ``label``'s prefix (``topology.aipaas.dev/``) that are levels above
    it: every node with ``label`` has the key, each of ``label``'s domains lies inside one of
    its domains, and it has fewer domains. Finer first (more domains), ties by key."""
    prefix = label.rsplit("/", 1)[0] + "/" if "/" in label else ""
    labelled = [n for n in nodes if label in n.labels]
    if not prefix or not labelled:
        return []
    keys = {k for n in labelled for k in n.labels if k.startswith(prefix) and k != label}
    below = len({n.labels[label] for n in labelled})
    out: list[tuple[int, str]] = []
    for key in keys:
        parent: dict[str, str] = {}
        nested = True
        for node in labelled:
            value = node.labels.get(key)
            if value is None or parent.setdefault(node.labels[label], value) != value:
                nested = False
                break
        count = len(set(parent.values()))
        if nested and count < below:
            out.append((-count, key))
    return [key for _, key in sorted(out)]


def _size_words(gang: Resources) -> tuple[str, int]:
    """('4-GPU', index of the resource the numbers speak of) for the message."""
    if gang.gpu_milli:
        return f"{amount(gang.gpu_milli, 1000)}-GPU", 0
    return f"{amount(gang.cpu_milli, 1000)}-CPU", 1


def _article(words: str) -> str:
    """'an' before a number said with a vowel first (8, 11, 18, 80-89, 800...), else 'a'."""
    number = words.split("-", 1)[0].split(".", 1)[0]
    spoken_vowel = (
        number.startswith("8")
        or (number in ("11", "18"))
        or (len(number) in (5, 8) and number[:2] in ("11", "18"))
    )
    return "an" if spoken_vowel else "a"


def place_in_domain(
    engine: PlacementEngine,
    pods: Sequence[PodRequest],
    label: str,
    allowed: Collection[str] | None,
    *,
    required: bool,
    view: DomainView | None = None,
    version: int | None = None,
) -> list[Placement] | Refusal:
    """Place all ``pods`` inside one domain of ``label`` (on ``allowed`` nodes only, when
    given); with ``required`` False, when no domain can hold them, inside one domain of the
    coarser levels in turn, then anywhere. ``view`` and ``version``: free capacity remembered
    between calls (see ``DomainView``)."""
    view = view or DomainView(engine)
    packed = _place_like_kueue(engine, pods, label, allowed, required=required, view=view)
    if packed is not None:
        return packed
    if not required:
        for level_label in (label, *view.coarser(label)):
            placed = place_in_domain(
                engine, pods, level_label, allowed, required=True, view=view, version=version
            )
            if not isinstance(placed, Refusal):
                return placed
        anywhere = engine.place(pods, nodes=allowed)
        if isinstance(anywhere, Unschedulable):
            return Refusal("Unschedulable", unschedulable_message(anywhere, len(pods)))
        return anywhere
    grouped = view.groups(label)
    gang = _gang_size(pods)
    level = level_name(label)
    candidates = []
    largest = 0
    words, index = _size_words(gang)
    for value, names in grouped.items():
        usable = names if allowed is None else [n for n in names if n in allowed]
        if not usable:
            continue
        free = view.free(usable, version)
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
    waiting = f"waiting for {_article(words)} {words} gang inside one {level}"
    message = f"{waiting}; the largest free {level} has {amount(largest, 1000)}"
    if not grouped:
        message = f"{waiting}; no node has the label {label}"
    elif last is not None:
        message += f" and no {level} with that much free fits its tasks ({'; '.join(last.reasons)})"
    return Refusal("Topology", message)


@runtime_checkable
class CountingEngine(Protocol):
    """An engine that can say how many copies of a pod each node takes (both engines can)."""

    def fit_counts(
        self, pod: PodRequest, nodes: Collection[str] | None = None
    ) -> dict[str, int]: ...


def _place_like_kueue(
    engine: PlacementEngine,
    pods: Sequence[PodRequest],
    label: str,
    allowed: Collection[str] | None,
    *,
    required: bool,
    view: DomainView,
) -> list[Placement] | None:
    """The gang placed node by node as ``topology_tas.assign`` says; None when it does not
    apply (pods of several shapes, claims, GPU shares) or finds no place (the caller then
    says why)."""
    if not pods or not isinstance(engine, CountingEngine):
        return None
    first = pods[0]
    if any(p.claims or p.share or _shape(p) != _shape(first) for p in pods):
        return None
    coarser = view.coarser(label)
    levels = [*reversed(coarser), label, *view.finer(label)]
    counts = engine.fit_counts(first, allowed)
    labels = {n.name: n.labels for n in engine.nodes}
    free = {}
    for name in counts:
        room = engine.free(name)
        free[name] = (room.gpu_milli, room.cpu_milli)
    tree = build_domains(levels, labels, counts, free)
    plan = assign(tree, len(coarser), len(pods), required=required)
    if isinstance(plan, int):
        return None
    placed: list[Placement] = []
    start = 0
    for node, count in plan:
        result = engine.place(pods[start : start + count], nodes=(node,))
        if isinstance(result, Unschedulable):
            for placement in reversed(placed):
                engine.release(placement)
            return None
        placed.extend(result)
        start += count
    return placed


def _shape(pod: PodRequest) -> tuple[object, ...]:
    return (pod.cpu_milli, pod.memory_mib, pod.gpu_count, pod.gpu_milli, pod.gpu_models)


def finer_levels(nodes: Sequence[Node], label: str) -> list[str]:
    """The label keys under ``label``'s prefix that are levels below it: every node with
    ``label`` has the key and it splits some of ``label``'s domains. Coarser first (fewer
    domains), ties by key."""
    prefix = label.rsplit("/", 1)[0] + "/" if "/" in label else ""
    labelled = [n for n in nodes if label in n.labels]
    if not prefix or not labelled:
        return []
    keys = {k for n in labelled for k in n.labels if k.startswith(prefix) and k != label}
    above = set(coarser_levels(nodes, label))
    domains_count = len({n.labels[label] for n in labelled})
    out: list[tuple[int, str]] = []
    for key in keys - above:
        if any(key not in n.labels for n in labelled):
            continue
        pairs = len({(n.labels[label], n.labels[key]) for n in labelled})
        if pairs > domains_count:
            out.append((pairs, key))
    return [key for _, key in sorted(out)]


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
    by_name = {n.name: n for n in nodes}
    for names in domains(nodes, label).values():
        members = [by_name[name] for name in names]
        room = Resources(
            sum(n.gpu_count for n in members) * 1000,
            sum(n.cpu_milli for n in members),
            sum(n.memory_mib for n in members),
            2**62,
        )
        if gang.fits_within(room):
            return True
    return False
