"""benchmarks/engines.py's accounting: the CPU a burst costs (the machine's, and by process
name, a command that ended counted in the process that waited for it), the table's derived
columns, and the results file keeping the backends a run did not measure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from _engines_run import Figures, cpu_by_name, cpu_by_process, machine_cpu
from engines import breakdown, merged, table

BURN = "import time\nwhile time.process_time() < 0.3: pass\n"


def _own_name() -> str:
    return Path("/proc/self/comm").read_text().strip()


def test_a_reaped_child_counts_in_its_parent_and_in_the_machine() -> None:
    machine_before, before = machine_cpu(), cpu_by_process()
    subprocess.run([sys.executable, "-c", BURN], check=True)
    spent = cpu_by_name(before)
    assert spent[_own_name()] >= 0.25
    assert machine_cpu() - machine_before >= 0.25


def test_processes_that_did_nothing_are_not_listed() -> None:
    before = cpu_by_process()
    spent = cpu_by_name(before)
    assert all(seconds > 0 for seconds in spent.values())


def _figures(rate: float, machine: float, own: float) -> Figures:
    figures = Figures(rate=rate, burst_cpu=own, machine_cpu=machine)
    figures.latency = {1: (0.5, 0.1), 8: (0.7, 0.2)}
    return figures


def test_the_table_gives_cpu_per_job_and_the_rate_it_allows() -> None:
    ours, alone = _figures(50.0, 15.0, 5.0), _figures(500.0, 1.5, 0.0)
    alone.latency = {1: (0.25, 0.0), 8: (0.5, 0.0)}
    text = table({"ray": (ours, alone)}, {"ray": "ray.remote"}, 500)
    rows = {line.split(" | ")[1]: line for line in text.splitlines()[2:]}
    cores = os.cpu_count() or 1
    assert "| 50.0 | 30.0 ms | 10.0 ms | " + f"{cores / 0.030:.0f} |" in rows["aipaas"]
    assert "| 500.0 | 3.0 ms |  | " + f"{cores / 0.003:.0f} |" in rows["ray.remote"]
    assert "| +0.25 s | | +0.20 s | | 10% of the engine's | +27.0 ms |" in rows["added"]


def test_the_breakdown_lists_names_on_either_side_largest_first() -> None:
    ours, alone = _figures(50.0, 15.0, 5.0), _figures(500.0, 1.5, 0.0)
    ours.by_name = {"aipaas": 5.0, "raylet": 1.0, "tiny": 0.01}
    alone.by_name = {"raylet": 0.5, "ray::IDLE": 2.0}
    lines = breakdown({"ray": (ours, alone)}, {"ray": "ray.remote"}, 500).splitlines()
    assert lines[3:] == [
        "| aipaas | 10.0 | 0.0 |",
        "| ray::IDLE | 0.0 | 4.0 |",
        "| raylet | 2.0 | 1.0 |",
        "| all | 12.0 | 5.0 |",
    ]


def test_merged_replaces_the_measured_backend_and_keeps_the_others() -> None:
    old = (
        "# Engines\n\n| backend | old header |\n|---|---|\n| local | aipaas | 1 |\n"
        "| ray | aipaas | old |\n\nThe local rows: local note.\n\nThe ray rows: old note.\n"
    )
    fresh = "| backend | new header |\n|---|---|\n| ray | aipaas | new |"
    text = merged(old, fresh, {"ray": "The ray rows: new note."})
    assert "| backend | new header |" in text
    assert "| local | aipaas | 1 |" in text and "The local rows: local note." in text
    assert "| ray | aipaas | new |" in text and "The ray rows: new note." in text
    assert "old" not in text.replace("old header", "")
