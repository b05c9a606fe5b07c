"""The models of benchmarks/elastic_day.py: the M/M/c numbers against closed forms, the spot
tier's evictions and checkpoints, and a few hours of the three set-ups."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from _elastic_model import BatchJob, Curve, SpotTier, erlang_c, rates, within_bound
from elastic_day import peak_replicas, run


def test_erlang_c_matches_the_closed_form() -> None:
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)  # M/M/2 at half load
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: P(wait) = rho
    assert erlang_c(3, 3.0) == 1.0  # unstable
    assert erlang_c(200, 100.0) < 1e-6


def test_response_time_share() -> None:
    # M/M/1: the response time is exponential with rate mu - lambda.
    assert within_bound(5.0, 10.0, 1, 0.5) == pytest.approx(1 - math.exp(-2.5))
    # Many idle replicas: only the service time counts.
    assert within_bound(1.0, 10.0, 100, 0.5) == pytest.approx(1 - math.exp(-5), rel=1e-6)
    assert within_bound(50.0, 10.0, 5, 0.5) == 0.0  # overloaded
    shares = [within_bound(60.0, 10.0, c, 0.5) for c in range(7, 20)]
    assert shares == sorted(shares)  # more replicas never answer fewer in time


def test_load_curve_is_diurnal_and_seeded() -> None:
    steps = 24 * 60
    one = rates(Curve(100.0), steps, 60.0, np.random.default_rng(1))
    two = rates(Curve(100.0), steps, 60.0, np.random.default_rng(1))
    assert np.array_equal(one, two)
    assert one[4 * 60] < 25 < 75 < one[16 * 60]  # low at 04:00, high at 16:00


def test_spot_tier_evicts_newest_first_and_keeps_checkpoints() -> None:
    jobs = [BatchJob("a", 4, 3600.0), BatchJob("b", 4, 3600.0)]
    spot = SpotTier(list(jobs), checkpoint_s=600.0, running=[])
    spot.step(0.0, 8)
    assert spot.used() == 8
    jobs[1].running_since = 100.0  # b started later
    spot.step(1000.0, 4)  # the lender takes four GPUs back
    assert [j.name for j in spot.running] == ["a"]
    assert jobs[1].done_s == 600.0  # one checkpoint kept of its 900 s
    assert spot.lost_gpu_s == pytest.approx(300.0 * 4)
    spot.step(3600.0, 8)  # a finishes; b starts again from its checkpoint
    assert spot.completed == 1 and [j.name for j in spot.running] == ["b"]
    assert spot.useful_gpu_s == pytest.approx(3600 * 4 + 600 * 4)


def test_a_few_hours_of_the_three_set_ups() -> None:
    rng = np.random.default_rng(3)
    steps = 4 * 240  # four hours of 15 s steps, from 04:00 (low) upwards
    curves = [rates(Curve(peak, low_hour=0.0), steps, 15.0, rng) for peak in (200.0, 100.0)]
    observed = [rng.poisson(c * 15.0) / 15.0 for c in curves]
    static, scaled, lent = (
        run(m, curves, observed, 3) for m in ("static", "autoscaled", "lending")
    )
    assert static.slo > 0.99 and scaled.slo > 0.98 and lent.slo > 0.98
    assert scaled.powered_gpu_h < static.powered_gpu_h
    assert lent.powered_gpu_h == static.powered_gpu_h
    assert static.batch_gpu_h == scaled.batch_gpu_h == 0 < lent.batch_gpu_h
    freed = static.powered_gpu_h - lent.inference_gpu_h
    assert lent.batch_gpu_h + lent.batch_lost_gpu_h <= freed + 1e-6  # only idle GPUs were lent
    assert peak_replicas(curves)[0] >= math.ceil(float(curves[0].max()) * 0.1 / 0.65)
