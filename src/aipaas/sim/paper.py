"""The FGD paper's published allocation numbers, for side-by-side comparison."""

from __future__ import annotations

import csv
from pathlib import Path


def load_paper_means(path: str | Path) -> dict[tuple[str, str, int], float]:
    """(workload, policy, arrived_pct) -> mean GPU allocation % over the paper's seeds."""
    table: dict[tuple[str, str, int], float] = {}
    with Path(path).open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            key = (row["workload"], row["policy"], int(row["arrived_pct"]))
            table[key] = float(row["gpu_alloc_pct_mean"])
    return table


def load_paper_rows(path: str | Path) -> dict[tuple[str, str, int], list[float | None]]:
    """(workload, policy, seed) -> the 131 published columns (None where empty)."""
    rows: dict[tuple[str, str, int], list[float | None]] = {}
    with Path(path).open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            values = [float(row[str(x)]) if row[str(x)] else None for x in range(131)]
            rows[(row["workload"], row["policy"], int(row["seed"]))] = values
    return rows
