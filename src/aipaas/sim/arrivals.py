"""The arrival sequence and node tie-break order of the FGD paper's protocol.

The paper shuffles the trace, then appends pods resampled with replacement until the GPU
request reaches ``tune`` times the cluster's GPU capacity, and gives every node a random
tie-break rank. Its draws come from Go's generator; ours come from NumPy's, so a seed here is
not the same sequence, only the same distribution. Exact sequences can be replayed from files.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from aipaas.scheduler.framework.cluster import NodeSpec
from aipaas.scheduler.framework.types import PodRequest
from aipaas.sim.openb import TraceError

TUNED_MARK = "-tuned-"


def paper_arrivals(
    pods: Sequence[PodRequest], total_gpu_milli: int, seed: int, tune: float
) -> list[PodRequest]:
    """Shuffled trace, then resampled clones (appended, not mixed in) up to ``tune``."""
    if tune <= 0:
        raise ValueError(f"tune: must be > 0, got {tune}")
    rng = np.random.default_rng(seed)
    ordered = sorted(pods, key=lambda p: p.name)
    arrivals = [ordered[i] for i in rng.permutation(len(ordered))]
    if not any(p.gpu_count for p in ordered):
        return arrivals
    target = tune * total_gpu_milli
    requested = sum(p.gpu_milli_total for p in ordered)
    clones = 0
    while True:
        pod = ordered[int(rng.integers(len(ordered)))]
        # The paper compares the per-GPU share with the target, not the pod's total.
        if requested + pod.gpu_milli > target:
            break
        arrivals.append(replace(pod, name=f"{pod.name}{TUNED_MARK}{clones}"))
        requested += pod.gpu_milli_total
        clones += 1
    return arrivals


def paper_tiebreak_rank(nodes: Sequence[NodeSpec], seed: int) -> list[int]:
    """A random rank per node (in the given order), drawn after the arrivals of ``seed``."""
    rng = np.random.default_rng([seed, 1])
    by_name = sorted(range(len(nodes)), key=lambda i: nodes[i].name)
    prefix = rng.permutation(len(nodes))
    rank = [0] * len(nodes)
    for position, node_index in enumerate(by_name):
        rank[node_index] = int(prefix[position])
    return rank


def arrivals_from_file(path: str | Path, pods: Sequence[PodRequest]) -> list[PodRequest]:
    """Arrivals as listed in a CSV (arrival_index, pod_name); clones are '<pod>-tuned-<k>'."""
    path = Path(path)
    by_name = {p.name: p for p in pods}
    arrivals: list[PodRequest] = []
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if "pod_name" not in (reader.fieldnames or []):
            raise TraceError(f"{path}: missing column pod_name")
        for number, row in enumerate(reader, start=2):
            name = row["pod_name"].strip()
            original = name.split(TUNED_MARK, 1)[0]
            if original not in by_name:
                raise TraceError(f"{path} row {number}: pod {original} is not in the trace")
            pod = by_name[original]
            arrivals.append(pod if name == original else replace(pod, name=name))
    if not arrivals:
        raise TraceError(f"{path}: no arrivals")
    return arrivals


def tiebreak_rank_from_file(path: str | Path, nodes: Sequence[NodeSpec]) -> list[int]:
    """Ranks from a CSV (node_name, tiebreak_prefix); every node must have one."""
    path = Path(path)
    index = {n.name: i for i, n in enumerate(nodes)}
    rank: list[int | None] = [None] * len(nodes)
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        for column in ("node_name", "tiebreak_prefix"):
            if column not in (reader.fieldnames or []):
                raise TraceError(f"{path}: missing column {column}")
        for number, row in enumerate(reader, start=2):
            name = row["node_name"].strip()
            if name not in index:
                raise TraceError(f"{path} row {number}: node {name} is not in the cluster")
            try:
                rank[index[name]] = int(row["tiebreak_prefix"])
            except ValueError:
                raise TraceError(
                    f"{path} row {number}: tiebreak_prefix is not a number: "
                    f"{row['tiebreak_prefix']!r}"
                ) from None
    missing = [nodes[i].name for i, r in enumerate(rank) if r is None]
    if missing:
        raise TraceError(f"{path}: no tie-break rank for {len(missing)} node(s), e.g. {missing[0]}")
    return [r for r in rank if r is not None]
