"""The fairness index of the openb batch benchmark (benchmarks/_openb_fairness.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "benchmarks"))

from _batch_run import JobOutcome, RunOutcome, Segment
from _openb_fairness import fairness, water_fill


def test_water_fill_caps_small_demands_and_splits_the_rest_equally() -> None:
    assert water_fill(12, [2, 10, 10]) == pytest.approx([2, 5, 5])
    assert water_fill(12, [0, 3, 3]) == pytest.approx([0, 3, 3])
    assert water_fill(9, [9, 9, 9]) == pytest.approx([3, 3, 3])


def _outcome(jobs: dict[str, JobOutcome], segments: list[Segment]) -> RunOutcome:
    return RunOutcome(jobs, {}, 0.0, {}, segments)


def test_a_tenant_that_asked_for_less_and_got_it_is_treated_fairly() -> None:
    # One window of 100 s on 4 GPUs: t0 wants 1 GPU and gets it; t1 has 3 GPUs of work and a
    # 1-GPU job that waits the whole window. Fair shares: t0 1, t1 3 (t1 asked for 4).
    jobs = {
        "t0/a": JobOutcome(0, 0, 100, 0, "Succeeded"),
        "t1/b": JobOutcome(0, 0, 100, 0, "Succeeded"),
        "t1/c": JobOutcome(0, None, None, 0, "Pending"),
        "t0/d": JobOutcome(0, None, None, 0, "Pending"),
    }
    segments = [
        Segment("t0/a", 0, 100, 1000, 0, False),
        Segment("t1/b", 0, 100, 3000, 0, False),
    ]
    gpus_of = {"t0/a": 1.0, "t1/b": 3.0, "t1/c": 1.0, "t0/d": 0.0}
    result = fairness(_outcome(jobs, segments), gpus_of, 2, 4, 100)
    assert result.windows == 1
    assert result.normalised == pytest.approx(1.0)
    assert result.raw == pytest.approx(16 / (2 * 10))  # (1 + 3)^2 / (2 (1 + 9))


def test_a_tenant_held_below_its_fair_share_lowers_the_index() -> None:
    # 4 GPUs, both tenants ask for 4 the whole window; t0 holds 3, t1 holds 1: shares 2 and 2.
    jobs = {
        "t0/a": JobOutcome(0, 0, 100, 0, "Succeeded"),
        "t0/w": JobOutcome(0, None, None, 0, "Pending"),
        "t1/b": JobOutcome(0, 0, 100, 0, "Succeeded"),
        "t1/w": JobOutcome(0, None, None, 0, "Pending"),
    }
    segments = [
        Segment("t0/a", 0, 100, 3000, 0, False),
        Segment("t1/b", 0, 100, 1000, 0, False),
    ]
    gpus_of = {"t0/a": 3.0, "t0/w": 1.0, "t1/b": 1.0, "t1/w": 3.0}
    result = fairness(_outcome(jobs, segments), gpus_of, 2, 4, 100)
    assert result.normalised == pytest.approx((1.5 + 0.5) ** 2 / (2 * (1.5**2 + 0.5**2)))
    assert result.normalised < 0.95
