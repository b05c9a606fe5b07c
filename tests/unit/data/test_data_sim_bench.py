"""benchmarks/data_sim.py: a short run prints every policy's row with a verdict, and the doc's
table is replaced between its markers only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from aipaas.data.sim_model import CACHE_ONLY, NO_CACHE, OURS
from data_sim import BEGIN, END, run_seed, write_doc


def test_a_short_run_gives_a_row_per_policy_and_a_verdict() -> None:
    section, results = run_seed(40, 3, [NO_CACHE, CACHE_ONLY, OURS])
    assert set(results) == {NO_CACHE.name, CACHE_ONLY.name, OURS.name}
    for name in results:
        assert f"| {name} |" in section
    assert "Target met." in section or "Target NOT met." in section
    # Without a cache every pass comes from the source: more bytes than with one.
    assert results[NO_CACHE.name].source_bytes > results[CACHE_ONLY.name].source_bytes
    assert all(len(r.jobs) == 40 for r in results.values())


def test_write_doc_replaces_only_between_the_markers(tmp_path: Path) -> None:
    doc = tmp_path / "data.md"
    doc.write_text(f"# head\n{BEGIN}\nold table\n{END}\ntail\n")
    write_doc(doc, "new table")
    assert doc.read_text() == f"# head\n{BEGIN}\nnew table\n{END}\ntail\n"
    doc.write_text("no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        write_doc(doc, "x")
