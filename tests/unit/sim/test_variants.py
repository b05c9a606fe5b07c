"""Workload variants built from a small default-like trace the way the FGD paper built its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aipaas.scheduler.framework.cluster import NodeSpec
from aipaas.scheduler.framework.types import PodRequest
from aipaas.sim.openb import load_pods
from aipaas.sim.variants import (
    PAPER_MODEL_LISTS,
    VARIANTS,
    Step,
    Variant,
    add_multi_gpu,
    build_variant,
    constrain_models,
    mix,
    scale_cpu_only,
    set_sharing,
    write_variants,
)

NODES = [
    NodeSpec("g2", 96_000, 1 << 20, 8, "G2"),
    NodeSpec("t4", 100_000, 1 << 20, 2, "T4"),
    NodeSpec("p100", 24_000, 1 << 20, 2, "P100"),
]


def sample() -> list[PodRequest]:
    """200 pods: 40 CPU-only, 80 sharing, 70 one whole GPU, 10 eight-GPU."""
    pods = [PodRequest(f"c{i}", 8_000 + 500 * (i % 3), 1_024) for i in range(40)]
    pods += [PodRequest(f"s{i}", 4_000, 1_024, 1, 300 + 50 * (i % 5)) for i in range(80)]
    pods += [PodRequest(f"w{i}", 12_000, 1_024, 1, 1000) for i in range(70)]
    pods += [PodRequest(f"m{i}", 64_000, 1_024, 8, 1000) for i in range(10)]
    return pods


def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def test_constrain_models_binds_the_share_to_lists_that_can_hold_each_pod() -> None:
    base = sample()
    out = constrain_models(base, NODES, 0.35, rng())
    bound = [p for p in out if p.gpu_models]
    assert len(bound) == round(0.35 * 160)  # of the 160 GPU pods
    lists = [set(text.split("|")) for text, _ in PAPER_MODEL_LISTS]
    for pod in bound:
        # A paper list less the models this cluster lacks (V100M16, V100M32, G3, A10).
        assert any(set(pod.gpu_models) == named & {"G2", "T4", "P100"} for named in lists)
    for pod in bound:
        # Some node of a named model holds the pod whole: an 8-GPU pod only on G2 here.
        assert any(n.gpu_model in pod.gpu_models and n.gpu_count >= pod.gpu_count for n in NODES)
    # Only the model lists change, and CPU-only pods are never bound.
    assert [(p.name, p.cpu_milli, p.gpu_milli) for p in out] == [
        (p.name, p.cpu_milli, p.gpu_milli) for p in base
    ]
    assert not any(p.gpu_models for p in out if not p.gpu_count)


def test_scale_cpu_only_redraws_cpu_only_pods_to_the_scaled_total() -> None:
    base = sample()
    before = sum(p.cpu_milli for p in base if not p.gpu_count)
    out = scale_cpu_only(base, base, 2.5, rng())
    after = sum(p.cpu_milli for p in out if not p.gpu_count)
    # Drawn until the total reaches 2.5x: past it by less than one pod (9 cores at most).
    assert 2.5 * before <= after < 2.5 * before + 9_000
    assert [p for p in out if p.gpu_count] == [p for p in base if p.gpu_count]
    assert len(scale_cpu_only(base, base, 0.5, rng())) < len(base)


@pytest.mark.parametrize("share", [0.4, 0.6, 1.0])
def test_set_sharing_reaches_the_share_with_as_many_gpu_pods(share: float) -> None:
    base = sample()
    out = set_sharing(base, base, share, rng())
    assert sum(1 for p in out if p.gpu_count) == 160
    assert [p for p in out if not p.gpu_count] == [p for p in base if not p.gpu_count]
    # Drawn with replacement, so the share is met on average: within 0.1 on 160 pods.
    assert mix(out)["sharing_milli_share"] == pytest.approx(share, abs=0.1)
    if share == 1.0:
        assert all(p.gpu_count == 1 and p.gpu_milli < 1000 for p in out if p.gpu_count)


def test_add_multi_gpu_appends_until_the_share() -> None:
    base = sample()
    out = add_multi_gpu(base, base, 0.5, rng())
    assert out[: len(base)] == base
    assert all(p.gpu_count > 1 for p in out[len(base) :])
    assert 0.5 <= mix(out)["multi_gpu_milli_share"] < 0.55


def test_build_variant_is_reproducible_and_renames_pods() -> None:
    mixed = next(v for v in VARIANTS if v.name == "x-mixed")
    first = build_variant(mixed, sample(), NODES)
    assert first == build_variant(mixed, sample(), NODES)
    assert [p.name for p in first] == [f"openb-pod-{i:04d}" for i in range(len(first))]
    other = Variant("other-seed", mixed.steps, mixed.seed + 1)
    assert build_variant(other, sample(), NODES) != first
    measured = mix(first)
    assert measured["bound_pod_share"] == pytest.approx(0.25, abs=0.01)
    assert measured["multi_gpu_milli_share"] >= 0.3


def test_unknown_step_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="steps: unknown kind 'gpu-spec'"):
        build_variant(Variant("bad", (Step("gpu-spec", 0.1),), 1), sample(), NODES)


def test_written_files_load_back_the_same(tmp_path: Path) -> None:
    chosen = [v for v in VARIANTS if v.name in ("x-gpuspec35", "x-cpu250")]
    written = write_variants(sample(), NODES, tmp_path, chosen)
    assert sorted(written) == ["x-cpu250", "x-gpuspec35"]
    for variant in chosen:
        path = written[variant.name]
        assert path.name == f"openb_pod_list_{variant.name}.csv"
        assert load_pods(path, NODES) == build_variant(variant, sample(), NODES)
    again = write_variants(sample(), NODES, tmp_path / "again", chosen)
    assert [p.read_bytes() for p in again.values()] == [p.read_bytes() for p in written.values()]


def test_every_variant_says_how_it_was_built() -> None:
    assert {v.name for v in VARIANTS} >= {
        "x-gpuspec25",
        "x-gpuspec35",
        "x-cpu250",
        "x-gpushare100",
        "x-multigpu50",
        "x-mixed",
    }
    assert VARIANTS[1].describe() == "25% of GPU pods constrained to GPU models (seed 1602)"
    assert len({v.seed for v in VARIANTS}) == len(VARIANTS)
