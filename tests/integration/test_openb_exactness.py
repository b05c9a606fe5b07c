"""The paper's seed-42 rows, column for column, from the paper's own arrival and node orders.

Needs the full openb trace and the order files in ../shared/data/openb (beside the repository);
skips, saying so, without them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aipaas.sim.experiment import OpenbRun, run_openb
from aipaas.sim.paper import load_paper_rows

DATA = Path(__file__).parents[2].parent / "shared/data/openb"
ORDERS = DATA / "orders"
COLUMNS = 131

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not DATA.is_dir(),
        reason=f"openb data directory {DATA} is absent (the full trace, orders/ and "
        "paper_default_per_seed.csv are needed)",
    ),
]


def differences(policy: str) -> list[tuple[int, float | None, float | None]]:
    result = run_openb(
        OpenbRun(
            str(DATA / "openb_node_list_gpu_node.csv"),
            str(DATA / "openb_pod_list_default.csv"),
            policy,
            seed=42,
            tune=1.3,
            arrival_order=str(ORDERS / "default_arrival_order_seed42.csv"),
            node_order=str(ORDERS / "default_node_tiebreak_seed42.csv"),
        )
    )
    assert result.pods_arrived == 10_866
    assert result.total_gpus == 6_212
    paper = load_paper_rows(DATA / "paper_default_per_seed.csv")[("default", policy, 42)]
    assert len(paper) == COLUMNS
    ours = {int(point["arrived_pct"]): point["gpu_alloc_pct"] for point in result.curve}
    return [
        (column, ours.get(column), paper[column])
        for column in range(COLUMNS)
        if ours.get(column) is None
        or paper[column] is None
        or abs(ours[column] - paper[column]) > 0.01  # type: ignore[operator]
    ]


@pytest.mark.parametrize("policy", ["fgd", "bestfit", "dotprod", "packing", "clustering"])
def test_seed42_row_matches_the_paper(policy: str) -> None:
    assert differences(policy) == []
