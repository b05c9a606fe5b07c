"""The allocation curve: half-to-even arrived %, the +-1 fallback window, empty columns."""

from __future__ import annotations

import numpy as np

from aipaas.sim.report import allocation_curve, value_at


def curve(
    arrived: list[int], allocated: list[int], total_gpus: int = 1, max_pct: int = 130
) -> list[dict[str, float]]:
    return allocation_curve(
        np.array(arrived, dtype=np.int64), np.array(allocated, dtype=np.int64), total_gpus, max_pct
    )


def test_half_to_even_and_fallback_window() -> None:
    # One GPU: arrived % = milli / 10.  5 -> 0.5 -> 0, 15 -> 1.5 -> 2, 25 -> 2.5 -> 2,
    # 35 -> 3.5 -> 4, 60 -> 6.  Allocation %: 0.5, 1.0, 2.0, 3.0, 4.0.
    points = curve([5, 15, 25, 35, 60], [5, 10, 20, 30, 40], max_pct=8)
    assert points == [
        {"arrived_pct": 0, "gpu_alloc_pct": 0.5},
        {"arrived_pct": 1, "gpu_alloc_pct": 1.17},  # none at 1: (0.5 + 1.0 + 2.0) / 3
        {"arrived_pct": 2, "gpu_alloc_pct": 1.5},  # (1.0 + 2.0) / 2
        {"arrived_pct": 3, "gpu_alloc_pct": 2.0},  # none at 3: (1.0 + 2.0 + 3.0) / 3
        {"arrived_pct": 4, "gpu_alloc_pct": 3.0},
        {"arrived_pct": 5, "gpu_alloc_pct": 3.5},  # none at 5: (3.0 + 4.0) / 2
        {"arrived_pct": 6, "gpu_alloc_pct": 4.0},
        {"arrived_pct": 7, "gpu_alloc_pct": 4.0},  # none at 7: only 6 in the window
        # 8: nothing within 7..9: left out
    ]


def test_empty_columns_are_left_out() -> None:
    points = curve([0, 100], [0, 90], max_pct=20)
    assert [p["arrived_pct"] for p in points] == [0, 1, 9, 10, 11]
    assert [p["gpu_alloc_pct"] for p in points] == [0.0, 0.0, 9.0, 9.0, 9.0]


def test_rounding_of_allocation_and_several_gpus() -> None:
    # Three GPUs: 1,000 milli is 33.333..% -> arrived 33, allocated 33.33;
    # 1,010 milli is 33.67% -> 34; 2,000 -> 66.67 -> 67 (alloc 1,999 -> 66.63).
    points = curve([1000, 1010, 2000], [1000, 1000, 1999], total_gpus=3, max_pct=70)
    assert points == [
        {"arrived_pct": 32, "gpu_alloc_pct": 33.33},
        {"arrived_pct": 33, "gpu_alloc_pct": 33.33},
        {"arrived_pct": 34, "gpu_alloc_pct": 33.33},
        {"arrived_pct": 35, "gpu_alloc_pct": 33.33},
        {"arrived_pct": 66, "gpu_alloc_pct": 66.63},
        {"arrived_pct": 67, "gpu_alloc_pct": 66.63},
        {"arrived_pct": 68, "gpu_alloc_pct": 66.63},
    ]


def test_mean_is_rounded_to_two_decimals() -> None:
    # Samples at 1 with allocation 0.1, 0.2, 0.2: mean 0.1666.. -> 0.17
    points = curve([10, 10, 10], [1, 2, 2], max_pct=1)
    assert points == [
        {"arrived_pct": 0, "gpu_alloc_pct": 0.17},
        {"arrived_pct": 1, "gpu_alloc_pct": 0.17},
    ]


def test_default_stops_at_130() -> None:
    points = curve([1290, 1310, 1400], [1000, 1001, 1002])
    assert points == [
        {"arrived_pct": 128, "gpu_alloc_pct": 100.0},  # window 127..129: 129 only
        {"arrived_pct": 129, "gpu_alloc_pct": 100.0},
        {"arrived_pct": 130, "gpu_alloc_pct": 100.05},  # window: (100.0 + 100.1) / 2
    ]


def test_no_samples() -> None:
    assert curve([], []) == []


def test_value_at() -> None:
    points = curve([5, 15, 25, 35, 60], [5, 10, 20, 30, 40], max_pct=8)
    assert value_at(points, 1) == 1.17
    assert value_at(points, 6) == 4.0
    assert value_at(points, 8) is None
    assert value_at([], 0) is None
