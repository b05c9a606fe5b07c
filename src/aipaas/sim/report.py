"""The paper's allocation curve: GPU allocation at every percent of arrived GPU demand."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

MAX_ARRIVED_PCT = 130


def allocation_curve(
    arrived_milli: npt.NDArray[np.int64],
    allocated_milli: npt.NDArray[np.int64],
    total_gpus: int,
    max_pct: int = MAX_ARRIVED_PCT,
) -> list[dict[str, float]]:
    """One point per integer arrived percent that the run reached.

    Each sample's arrived percent is rounded half-to-even and its allocation rounded to two
    decimals; a column is the mean allocation of its samples, or of the samples within one
    percent on either side when it has none (as the paper's analysis does).
    """
    by_pct: dict[int, list[float]] = defaultdict(list)
    for arrived, allocated in zip(arrived_milli.tolist(), allocated_milli.tolist(), strict=True):
        pct = round(arrived / total_gpus / 10)
        by_pct[pct].append(round(allocated / total_gpus / 10, 2))
    curve: list[dict[str, float]] = []
    for pct in range(max_pct + 1):
        values = by_pct.get(pct)
        if not values:
            values = [v for p in (pct - 1, pct, pct + 1) for v in by_pct.get(p, [])]
        if values:
            # NumPy's pairwise sum, as pandas' mean uses: a plain loop can differ in the last bit.
            mean = float(np.mean(np.array(values, dtype=np.float64)))
            curve.append({"arrived_pct": pct, "gpu_alloc_pct": round(mean, 2)})
    return curve


def value_at(curve: Sequence[dict[str, float]], pct: int) -> float | None:
    for point in curve:
        if point["arrived_pct"] == pct:
            return point["gpu_alloc_pct"]
    return None
