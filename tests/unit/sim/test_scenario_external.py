"""Scenario cases translated from other schedulers' published tests (Volcano's preempt and
reclaim actions, Kueue's preemption and fair sharing, KAI-Scheduler's reclaim, Slurm's backfill)
under tests/data/scenarios/external/<source>/: each file names its source test in a comment and
holds its expected decision worked out under issue 11's semantics. They live one folder deeper
than the topic cases, which test_scenario_cases.py's ``*/*.yaml`` does not reach, so they run
here with the same comparison."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.sim.test_scenario_cases import CASES, check_case

EXTERNAL = CASES / "external"


def external_cases() -> list[Path]:
    return sorted(EXTERNAL.glob("*/*.yaml"))


@pytest.mark.parametrize("case", external_cases(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_external_case(case: Path) -> None:
    check_case(case)


def test_every_source_has_cases() -> None:
    """Each source project named in issue 11's acceptance has its translated cases."""
    by_source = {p.parent.name for p in external_cases()}
    assert {"volcano", "kueue", "kai", "slurm"} <= by_source, by_source
    assert len(external_cases()) >= 30
