"""How much of a job's data a node, or a group of nodes, holds: what data affinity scores.

Pure. The caller (the live controller's dataset extension, or the simulator) keeps a
:class:`DataView` up to date: bytes of each dataset present on each node, datasets being
loaded, and the datasets each waiting job reads. Pods are matched to their job by name: a pod
named ``<job key>/<task>`` belongs to ``<job key>`` (the batch scheduler's naming,
``tenant/job/task-0``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


def job_of(pod_name: str) -> str:
    """The job key of a pod named ``<job key>/<task>``."""
    return pod_name.rsplit("/", 1)[0]


@dataclass(frozen=True, slots=True)
class DataNeed:
    dataset: str
    size_bytes: int


@dataclass
class DataView:
    """Cache contents and data needs, as the scheduler may read them."""

    #: node -> dataset -> bytes present (a partial copy counts what it holds).
    cached: dict[str, dict[str, int]] = field(default_factory=dict)
    #: node -> datasets a load is filling now.
    loading: dict[str, set[str]] = field(default_factory=dict)
    #: job key -> datasets it reads.
    needs: dict[str, tuple[DataNeed, ...]] = field(default_factory=dict)

    def needs_of_pod(self, pod_name: str) -> tuple[DataNeed, ...]:
        return self.needs.get(job_of(pod_name), ())

    def held(self, node: str, need: DataNeed, loading_credit: float) -> float:
        """Bytes of ``need`` on ``node``, a running load counting the bytes still to come at
        ``loading_credit`` (they are on their way, not there)."""
        present = min(self.cached.get(node, {}).get(need.dataset, 0), need.size_bytes)
        if need.dataset in self.loading.get(node, ()):
            return present + loading_credit * (need.size_bytes - present)
        return float(present)


def node_fraction(
    view: DataView, node: str, needs: Sequence[DataNeed], loading_credit: float = 0.5
) -> float:
    """Share (0..1) of the bytes of ``needs`` that ``node`` holds; 0 for no data."""
    total = sum(need.size_bytes for need in needs)
    if total <= 0:
        return 0.0
    return sum(view.held(node, need, loading_credit) for need in needs) / total


def group_fraction(
    view: DataView, nodes: Iterable[str], needs: Sequence[DataNeed], loading_credit: float = 0.5
) -> float:
    """Share (0..1) of the bytes of ``needs`` found somewhere in a group of nodes (each
    dataset counted once, at its best copy): a peer in the group serves it faster than the
    source does."""
    total = sum(need.size_bytes for need in needs)
    if total <= 0:
        return 0.0
    members = list(nodes)
    best = 0.0
    for need in needs:
        best += max((view.held(node, need, loading_credit) for node in members), default=0.0)
    return best / total


def rank_domains(
    view: DataView,
    job: str,
    domains: Mapping[str, Sequence[str]],
    loading_credit: float = 0.5,
) -> list[str]:
    """Domains (group name -> its nodes) ordered for a gang of ``job``: most of the job's data
    held on the domain's nodes first, summed over its nodes (each node of a gang reads the whole
    dataset, so every warm node counts); ties by name."""
    needs = view.needs.get(job, ())

    def warmth(name: str) -> float:
        return sum(node_fraction(view, n, needs, loading_credit) for n in domains[name])

    return sorted(domains, key=lambda name: (-warmth(name), name))
