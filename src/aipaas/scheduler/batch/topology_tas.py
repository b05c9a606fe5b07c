"""Where a gang of like pods goes in a topology, as Kueue's topology-aware scheduling decides.

Who calls it: ``topology.place_in_domain`` (the allocate and backfill actions), with how many
copies of the gang's pod each node can take now. Pure: counts and node labels in, pods per
node out; the caller then places them through the engine.

The levels run from the coarsest to the node (``levels`` below, e.g. block, rack, node). A
domain's count is the sum of its nodes' counts. Then:

1. At the asked level, sort the domains by count (largest first; ties: the fuller first, by
   free GPU then CPU, then by their label values) and take the first with the smallest count
   that still holds the whole gang (best fit).
2. None holds it: a required level fails. A preferred level tries the next coarser level the
   same way; at the coarsest, the gang is spread over the fewest domains: take the largest
   while what is left does not fit in one, then the smallest that holds the rest.
3. Going down level by level, the children of the chosen domains are chosen the same way (the
   fewest domains, the last one best fit), down to the nodes: the fewest nodes, the last one
   the fullest that still holds the rest of the gang.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["Domain", "assign", "build_domains"]


@dataclass(eq=False, slots=True)
class Domain:
    """A domain of one level (or a node, at the last level) and how many pods it can take."""

    values: tuple[str, ...]  # its label values from the coarsest level down (a node: + name)
    count: int = 0
    free: tuple[int, int] = (0, 0)  # free GPU milli and CPU milli, summed over its nodes
    children: list[Domain] = field(default_factory=list)


def build_domains(
    levels: Sequence[str],
    labels: Mapping[str, Mapping[str, str]],
    counts: Mapping[str, int],
    free: Mapping[str, tuple[int, int]],
) -> list[list[Domain]]:
    """Domains per level, coarsest first, then one per node: every node in ``labels`` that has
    every level's label (the others are outside the topology), with its ``counts`` (0 when
    absent) and ``free`` room summed up the tree."""
    per_level: list[dict[tuple[str, ...], Domain]] = [{} for _ in range(len(levels) + 1)]
    for node, node_labels in labels.items():
        if any(level not in node_labels for level in levels):
            continue
        values = tuple(node_labels[level] for level in levels)
        parent: Domain | None = None
        for depth in range(len(levels) + 1):
            key = values[: depth + 1] if depth < len(levels) else (*values, node)
            domain = per_level[depth].get(key)
            if domain is None:
                domain = per_level[depth][key] = Domain(key)
                if parent is not None:
                    parent.children.append(domain)
            domain.count += counts.get(node, 0)
            room = free.get(node, (0, 0))
            domain.free = (domain.free[0] + room[0], domain.free[1] + room[1])
            parent = domain
    return [list(level.values()) for level in per_level]


def assign(
    domains: list[list[Domain]], level: int, wanted: int, *, required: bool
) -> list[tuple[str, int]] | int:
    """Pods per node (node name, count), in the order of their label values; or, when the
    gang cannot be placed, the most pods one domain of the asked level could take."""
    chosen, fit_level = _fit_level(domains, level, wanted, required=required)
    if fit_level < 0:
        return max((d.count for d in domains[level]), default=0)
    picked = _fewest(chosen, wanted)
    for _ in range(fit_level + 1, len(domains)):
        picked = _fewest(_sorted([c for d, _ in picked for c in d.children]), wanted)
    leaves = sorted(picked, key=lambda pair: pair[0].values)
    return [(d.values[-1], n) for d, n in leaves if n > 0]


def _fit_level(
    domains: list[list[Domain]], level: int, wanted: int, *, required: bool
) -> tuple[list[Domain], int]:
    """The domains to start from and their level (-1: none can take the gang)."""
    ordered = _sorted(domains[level])
    if ordered and ordered[0].count >= wanted:
        return [ordered[_best_fit(ordered, wanted)]], level
    if required:
        return [], -1
    if level > 0:
        return _fit_level(domains, level - 1, wanted, required=False)
    if sum(d.count for d in ordered) < wanted:
        return [], -1
    return ordered, level


def _fewest(ordered: list[Domain], wanted: int) -> list[tuple[Domain, int]]:
    """The fewest of ``ordered`` (largest first) that together take ``wanted``, the last one
    the smallest that takes what is left, with the pods each takes."""
    out: list[tuple[Domain, int]] = []
    left = wanted
    for index, domain in enumerate(ordered):
        if left <= 0:
            break
        if domain.count >= left:
            last = ordered[index + _best_fit(ordered[index:], left)]
            out.append((last, left))
            return out
        if domain.count == 0:
            break
        out.append((domain, domain.count))
        left -= domain.count
    return out


def _sorted(domains: list[Domain]) -> list[Domain]:
    """Largest count first; equal counts: the fuller first (less free GPU, then CPU), so the
    best fit keeps roomier domains whole; then by label values."""
    return sorted(domains, key=lambda d: (-d.count, d.free, d.values))


def _best_fit(ordered: list[Domain], wanted: int) -> int:
    """In ``ordered`` (largest first), the first domain of the smallest count >= ``wanted``."""
    best = 0
    for index, domain in enumerate(ordered):
        if domain.count >= wanted and domain.count != ordered[best].count:
            best = index
    return best
