"""Node constraints of a pod: nodeSelector, node affinity, taints and tolerations.

Who calls it: the ``Scheduler`` (framework/runtime.py) for every pod that carries
``NodeConstraints``, in the live controller and in ``aipaas simulate`` alike, so both refuse
and prefer the same nodes. Pure; node labels and taints do not change for a ClusterState, so
the answer per distinct constraint is kept in ``ConstraintCache``.

Semantics, as kube-scheduler's NodeAffinity and TaintToleration plugins:

- nodeSelector: every label equal. Required node affinity: any one term, each with all its
  expressions (In, NotIn, Exists, DoesNotExist, Gt, Lt; NotIn and DoesNotExist match a node
  without the label) and fields (``metadata.name``).
- A NoSchedule or NoExecute taint keeps the pod off unless a toleration matches (key, or
  Exists without key; value for Equal; effect, or no effect for every effect).
- Preferences (aipaas's order, see docs/scheduling.md): among feasible nodes, those with the
  highest sum of matching preferred-term weights, then the fewest untolerated
  PreferNoSchedule taints, go first; the profile's scores choose among them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from aipaas.scheduler.framework.cluster import BoolArray, ClusterState, IntArray
from aipaas.scheduler.framework.types import (
    NodeConstraints,
    Requirement,
    Taint,
    Term,
    Toleration,
)

__all__ = [
    "TAINTS_ANNOTATION",
    "UNHEALTHY_GPUS_ANNOTATION",
    "ConstraintCache",
    "matches_term",
    "parse_indices",
    "parse_taints",
    "tolerates",
    "untolerated",
]

HARD_EFFECTS = ("NoSchedule", "NoExecute")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TAINTS_ANNOTATION = "aipaas.dev/taints"
"""A node's taints as a backend reports them, in kubectl's words: ``key=value:Effect,...``."""
UNHEALTHY_GPUS_ANNOTATION = "aipaas.dev/unhealthy-gpus"
"""The indices of a node's GPUs that take nothing new, as a backend reports them: ``0,3``."""
SELECTOR_REASON = "node(s) didn't match the pod's node selector or affinity"


class ConstraintCache:
    """Per distinct ``NodeConstraints``: the nodes it admits, its preference per node, and
    the refusal reasons per node (for diagnosis)."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._masks: dict[NodeConstraints, BoolArray] = {}
        self._ranks: dict[NodeConstraints, IntArray | None] = {}

    def mask(self, constraints: NodeConstraints) -> BoolArray:
        found = self._masks.get(constraints)
        if found is None:
            nodes = self.state.nodes
            found = np.array(
                [refusal(constraints, n.name, n.labels, n.taints) is None for n in nodes],
                dtype=np.bool_,
            )
            self._masks[constraints] = found
        return found

    def rank(self, constraints: NodeConstraints) -> IntArray | None:
        """Per node, how much the pod prefers it (higher first); None: no preference."""
        if constraints in self._ranks:
            return self._ranks[constraints]
        found: IntArray | None = None
        nodes = self.state.nodes
        soft_taints = any(t.effect == "PreferNoSchedule" for n in nodes for t in n.taints)
        if constraints.preferred or soft_taints:
            weights = np.array(
                [_preference(constraints, n.name, n.labels) for n in nodes], dtype=np.int64
            )
            soft = ("PreferNoSchedule",)
            avoided = np.array(
                [len(untolerated(n.taints, constraints.tolerations, soft)) for n in nodes],
                dtype=np.int64,
            )
            # weights up to 16 x 100 = 1600; the taint count breaks ties within a weight
            found = weights * 1024 - avoided
        self._ranks[constraints] = found
        return found

    def explain(self, constraints: NodeConstraints) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.state.nodes:
            reason = refusal(constraints, node.name, node.labels, node.taints)
            if reason is not None:
                counts[reason] = counts.get(reason, 0) + 1
        return counts


def refusal(
    constraints: NodeConstraints, name: str, labels: Mapping[str, str], taints: Sequence[Taint]
) -> str | None:
    """Why the node is refused (the first reason), or None when the pod may go there."""
    required = constraints.required
    if any(labels.get(k) != v for k, v in constraints.selector) or (
        required and not any(matches_term(t, name, labels) for t in required)
    ):
        return SELECTOR_REASON
    bad = untolerated(taints, constraints.tolerations, HARD_EFFECTS)
    if bad:
        return f"node(s) had untolerated taint {{{bad[0].key}: {bad[0].value}}}"
    for taint in taints:
        # A NoExecute taint tolerated only for a while (tolerationSeconds on the first
        # toleration that matches it, as Kubernetes' taint manager reads it) would end a new
        # pod when the time runs out: the node is refused to new pods (Kubernetes binds them
        # and evicts them later, over and over while the taint stays); pods already there stay
        # their time (batch/actions/taint_eviction.py).
        if taint.effect == "NoExecute":
            used = next((o for o in constraints.tolerations if tolerates(o, taint)), None)
            if used is not None and used.seconds is not None:
                return (
                    f"node(s) had taint {{{taint.key}: {taint.value}}} tolerated only "
                    f"{max(used.seconds, 0)} s"
                )
    return None


def parse_taints(text: str) -> tuple[Taint, ...]:
    """``gpu=broken:NoSchedule,maintenance:NoExecute`` -> taints; an entry without a known
    effect is left out (the node is then not tainted by it)."""
    taints: list[Taint] = []
    for entry in text.split(","):
        body, _, effect = entry.strip().rpartition(":")
        key, _, value = body.partition("=")
        if key and effect in EFFECTS:
            taints.append(Taint(key, value, effect))
    return tuple(taints)


def parse_indices(text: str) -> tuple[int, ...]:
    """``0,3`` -> (0, 3); what is not a number is left out."""
    return tuple(int(p) for p in (x.strip() for x in text.split(",")) if p.isdigit())


def matches_term(term: Term, name: str, labels: Mapping[str, str]) -> bool:
    expressions, fields = term
    if not expressions and not fields:
        return False  # an empty term matches no node, as in Kubernetes
    return all(_requirement(r, labels) for r in expressions) and all(
        _requirement(r, {"metadata.name": name}) for r in fields
    )


def untolerated(
    taints: Sequence[Taint], tolerations: Sequence[Toleration], effects: Sequence[str]
) -> list[Taint]:
    """The taints of ``effects`` that no toleration tolerates."""
    return [
        t for t in taints if t.effect in effects and not any(tolerates(o, t) for o in tolerations)
    ]


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if not toleration.key:
        return toleration.operator == "Exists"
    if toleration.key != taint.key:
        return False
    return toleration.operator == "Exists" or toleration.value == taint.value


def _preference(constraints: NodeConstraints, name: str, labels: Mapping[str, str]) -> int:
    return sum(w for w, term in constraints.preferred if matches_term(term, name, labels))


def _requirement(rule: Requirement, labels: Mapping[str, str]) -> bool:
    key, operator, values = rule
    present = key in labels
    value = labels.get(key, "")
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False
