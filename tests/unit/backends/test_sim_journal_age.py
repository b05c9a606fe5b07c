"""The sim journal's age limit is a setting (Settings.sim_journal_max_age_seconds), carried
from the settings through make_backend to the journal's trim."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from aipaas.backends.base import TaskState
from aipaas.backends.registry import make_backend
from aipaas.backends.sim import SimBackend
from aipaas.clock import VirtualClock
from aipaas.settings import Settings
from tests.unit.backends.test_sim_journal_trim import request


def test_the_setting_defaults_to_a_day_and_must_be_positive() -> None:
    assert Settings().sim_journal_max_age_seconds == 24 * 3600
    assert Settings(sim_journal_max_age_seconds=60).sim_journal_max_age_seconds == 60
    with pytest.raises(ValidationError, match="sim_journal_max_age_seconds"):
        Settings(sim_journal_max_age_seconds=0)


def finished_after(backend: SimBackend, clock: VirtualClock, tmp_path: Path) -> TaskState:
    """Run 100 one-second tasks, one every 10 s; the state the backend then has of the 41st."""
    for i in range(100):
        rid = f"t{i:03d}"
        backend.start(replace(request(rid, tmp_path, duration=1), node=backend.nodes[0].name))
        clock.advance(10)
        assert backend.status([rid])[rid].state is TaskState.SUCCEEDED
    return backend.status(["t060"])["t060"].state


@pytest.mark.parametrize(
    ("max_age", "state"), [(120.0, TaskState.UNKNOWN), (None, TaskState.SUCCEEDED)]
)
def test_make_backend_trims_by_the_age_it_is_given(
    tmp_path: Path, max_age: float | None, state: TaskState
) -> None:
    clock = VirtualClock()
    settings = Settings() if max_age is None else Settings(sim_journal_max_age_seconds=max_age)
    backend = make_backend(
        "sim",
        tmp_path / "run",
        clock=clock,
        sim_journal_max_records=50,
        sim_journal_max_age_seconds=settings.sim_journal_max_age_seconds,
    )
    assert isinstance(backend, SimBackend)
    assert backend.journal_max_age_seconds == settings.sim_journal_max_age_seconds
    # t060 ended 390 s before the last task: past a 120 s limit, within a day and the newest 50.
    assert finished_after(backend, clock, tmp_path) is state
