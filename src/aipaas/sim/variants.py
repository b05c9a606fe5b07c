"""Workload variants of the openb default trace, built the way the FGD paper built its own.

Studying the given variants against the default trace shows how the paper made each kind, and
these builders do the same with our own seeds (so the mixes are new, not copies):

* ``gpuspec``: a share of the GPU pods is constrained to GPU models; each constrained pod draws
  a model list from the lists the paper's gpuspec10 trace uses, in its proportions, among those
  lists naming a model whose nodes can hold the pod (GPU count, CPU, memory).
* ``cpu``: the GPU pods are kept; the CPU-only pods are redrawn (with replacement) from the
  default's CPU-only pods until their CPU totals ``scale`` times the default's CPU-only CPU.
* ``gpushare``: the CPU-only pods are kept; as many GPU pods as before are redrawn from the
  default's sharing pods (one GPU, under 1000 milli) and its other GPU pods, so that sharing
  pods ask for ``share`` of all GPU milli.
* ``multigpu``: pods asking for several GPUs, drawn from the default's, are added until such
  pods ask for ``share`` of all GPU milli.

A ``mixed`` variant applies several of these in turn. Pods are renamed ``openb-pod-NNNN`` in
their new order; arrivals are shuffled anyway, so the order in the file does not matter.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from aipaas.scheduler.framework.cluster import NodeSpec
from aipaas.scheduler.framework.types import MILLI_PER_GPU, PodRequest

#: The model lists of the paper's gpuspec10 trace with how many of its pods name each.
PAPER_MODEL_LISTS: tuple[tuple[str, int], ...] = (
    ("T4", 355),
    ("G2", 120),
    ("P100", 100),
    ("V100M16|V100M32", 61),
    ("P100|V100M16|V100M32", 26),
    ("G2|P100|T4|V100M16|V100M32", 20),
    ("G3", 17),
    ("A10|G2|T4|V100M16|V100M32", 9),
    ("P100|V100M16", 6),
    ("P100|T4|V100M16|V100M32", 5),
    ("V100M16", 4),
    ("V100M32", 4),
    ("A10|G2|P100|T4|V100M16|V100M32", 3),
    ("T4|V100M16|V100M32", 1),
    ("A10|T4", 1),
)


@dataclass(frozen=True)
class Step:
    """One change to a workload: kind (gpuspec, cpu, gpushare, multigpu) and its amount."""

    kind: str
    amount: float


@dataclass(frozen=True)
class Variant:
    name: str
    steps: tuple[Step, ...]
    seed: int

    def describe(self) -> str:
        words = {
            "gpuspec": "{:.0%} of GPU pods constrained to GPU models",
            "cpu": "CPU-only pods' CPU x{:g}",
            "gpushare": "sharing pods ask {:.0%} of GPU milli",
            "multigpu": "multi-GPU pods ask {:.0%} of GPU milli",
        }
        parts = [words[s.kind].format(s.amount) for s in self.steps]
        return "; ".join(parts) + f" (seed {self.seed})"


#: Our variants (seeds of our own, 1601..): the paper's ranges, at and beyond its given points.
VARIANTS: tuple[Variant, ...] = (
    Variant("x-gpuspec20", (Step("gpuspec", 0.20),), 1601),
    Variant("x-gpuspec25", (Step("gpuspec", 0.25),), 1602),
    Variant("x-gpuspec35", (Step("gpuspec", 0.35),), 1603),
    Variant("x-cpu150", (Step("cpu", 1.5),), 1604),
    Variant("x-cpu250", (Step("cpu", 2.5),), 1605),
    Variant("x-gpushare100", (Step("gpushare", 1.0),), 1606),
    Variant("x-multigpu50", (Step("multigpu", 0.50),), 1607),
    Variant(
        "x-mixed",
        (Step("gpushare", 0.6), Step("multigpu", 0.3), Step("cpu", 2.0), Step("gpuspec", 0.25)),
        1608,
    ),
)


def _is_sharing(pod: PodRequest) -> bool:
    return pod.gpu_count == 1 and pod.gpu_milli < MILLI_PER_GPU


def _gpu_milli(pods: Sequence[PodRequest]) -> int:
    return sum(p.gpu_milli_total for p in pods)


def constrain_models(
    pods: Sequence[PodRequest], nodes: Sequence[NodeSpec], share: float, rng: np.random.Generator
) -> list[PodRequest]:
    gpu_pods = [i for i, p in enumerate(pods) if p.gpu_count and not p.gpu_models]
    chosen = rng.choice(gpu_pods, size=round(share * len(gpu_pods)), replace=False)
    # Models the cluster lacks are left out of a list (a trace may only name the cluster's).
    known = {n.gpu_model for n in nodes if n.gpu_model}
    lists = [tuple(m for m in text.split("|") if m in known) for text, _ in PAPER_MODEL_LISTS]
    weights = np.array([count for _, count in PAPER_MODEL_LISTS], dtype=np.float64)
    out = list(pods)
    for index in sorted(int(i) for i in chosen):
        pod = pods[index]
        room = [
            any(
                n.gpu_model in models
                and n.gpu_count >= pod.gpu_count
                and n.cpu_milli >= pod.cpu_milli
                and n.memory_mib >= pod.memory_mib
                for n in nodes
            )
            for models in lists
        ]
        usable = weights * np.array(room)
        if usable.sum() > 0:
            pick = int(rng.choice(len(lists), p=usable / usable.sum()))
            out[index] = replace(pod, gpu_models=lists[pick])
    return out


def scale_cpu_only(
    pods: Sequence[PodRequest], base: Sequence[PodRequest], scale: float, rng: np.random.Generator
) -> list[PodRequest]:
    pool = [p for p in base if not p.gpu_count]
    target = scale * sum(p.cpu_milli for p in pool)
    cpu_only: list[PodRequest] = []
    total = 0
    while total < target:
        pod = pool[int(rng.integers(len(pool)))]
        cpu_only.append(pod)
        total += pod.cpu_milli
    return cpu_only + [p for p in pods if p.gpu_count]


def set_sharing(
    pods: Sequence[PodRequest], base: Sequence[PodRequest], share: float, rng: np.random.Generator
) -> list[PodRequest]:
    sharing = [p for p in base if _is_sharing(p)]
    whole = [p for p in base if p.gpu_count and not _is_sharing(p)]
    count = sum(1 for p in pods if p.gpu_count)
    mean_sharing = _gpu_milli(sharing) / len(sharing)
    mean_whole = _gpu_milli(whole) / len(whole)
    # k sharing pods of count ask share of the milli: k*a = share*(k*a + (count-k)*b).
    k = round(share * count * mean_whole / (mean_sharing * (1 - share) + share * mean_whole))
    drawn = [sharing[int(i)] for i in rng.integers(len(sharing), size=k)]
    if count > k:
        drawn += [whole[int(i)] for i in rng.integers(len(whole), size=count - k)]
    return [p for p in pods if not p.gpu_count] + drawn


def add_multi_gpu(
    pods: Sequence[PodRequest], base: Sequence[PodRequest], share: float, rng: np.random.Generator
) -> list[PodRequest]:
    pool = [p for p in base if p.gpu_count > 1]
    out = list(pods)
    multi = sum(p.gpu_milli_total for p in out if p.gpu_count > 1)
    total = _gpu_milli(out)
    while multi < share * total:
        pod = pool[int(rng.integers(len(pool)))]
        out.append(pod)
        multi += pod.gpu_milli_total
        total += pod.gpu_milli_total
    return out


def build_variant(
    variant: Variant, base: Sequence[PodRequest], nodes: Sequence[NodeSpec]
) -> list[PodRequest]:
    """The variant's pods, from the default trace ``base`` on cluster ``nodes``."""
    rng = np.random.default_rng(variant.seed)
    steps: dict[str, Callable[[list[PodRequest], float], list[PodRequest]]] = {
        "gpuspec": lambda pods, x: constrain_models(pods, nodes, x, rng),
        "cpu": lambda pods, x: scale_cpu_only(pods, base, x, rng),
        "gpushare": lambda pods, x: set_sharing(pods, base, x, rng),
        "multigpu": lambda pods, x: add_multi_gpu(pods, base, x, rng),
    }
    pods = list(base)
    for step in variant.steps:
        if step.kind not in steps:
            raise ValueError(f"steps: unknown kind {step.kind!r} (one of {', '.join(steps)})")
        pods = steps[step.kind](pods, step.amount)
    return [replace(p, name=f"openb-pod-{i:04d}") for i, p in enumerate(pods)]


def write_pods(pods: Sequence[PodRequest], path: str | Path) -> None:
    """A pod list CSV in the trace's own columns (readable by ``load_pods``)."""
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"])
        for p in pods:
            models = "|".join(p.gpu_models)
            writer.writerow([p.name, p.cpu_milli, p.memory_mib, p.gpu_count, p.gpu_milli, models])


def write_variants(
    base: Sequence[PodRequest],
    nodes: Sequence[NodeSpec],
    folder: str | Path,
    variants: Sequence[Variant] = VARIANTS,
) -> dict[str, Path]:
    """Write each variant as ``openb_pod_list_<name>.csv`` under ``folder``; name -> path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for variant in variants:
        path = folder / f"openb_pod_list_{variant.name}.csv"
        write_pods(build_variant(variant, base, nodes), path)
        written[variant.name] = path
    return written


def mix(pods: Sequence[PodRequest]) -> dict[str, float]:
    """What a workload is made of: the measures the variants change."""
    gpu_pods = [p for p in pods if p.gpu_count]
    milli = max(_gpu_milli(gpu_pods), 1)
    return {
        "pods": len(pods),
        "cpu_only_pods": len(pods) - len(gpu_pods),
        "cpu_cores": sum(p.cpu_milli for p in pods) / 1000,
        "gpus": milli / MILLI_PER_GPU,
        "sharing_milli_share": sum(p.gpu_milli for p in gpu_pods if _is_sharing(p)) / milli,
        "multi_gpu_milli_share": sum(p.gpu_milli_total for p in gpu_pods if p.gpu_count > 1)
        / milli,
        "bound_pod_share": sum(1 for p in gpu_pods if p.gpu_models) / max(len(gpu_pods), 1),
    }
