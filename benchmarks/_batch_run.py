"""Helpers of the batch benchmarks: run a Scenario document through ``aipaas simulate run``,
and the statistics the tables print.

Two ways: ``run_document`` writes the scenario as JSON (the form sim/scenario.py reads fastest)
to a temporary file and runs the CLI's own command on it in this process (its JSON output is the
contract of issue 11; the wall time is what a user of ``aipaas simulate run`` waits for);
``run_observed`` calls the same functions the command calls (validate, build, ``ScenarioRun``)
on the document in memory and also records every task's runs (start, end, evicted or not)
from each cycle's decisions, which the contract's output does not carry (a job's ``started``
there is its first start only).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class JobOutcome:
    submitted: float
    started: float | None
    finished: float | None
    evictions: int
    phase: str


@dataclass(frozen=True)
class Segment:
    """One run of one task: [start, end), ended by an eviction or not."""

    job: str
    start: float
    end: float
    gpu_milli: int
    cpu_milli: int
    evicted: bool


@dataclass
class RunOutcome:
    jobs: dict[str, JobOutcome]
    queues: dict[str, Any]
    wall_seconds: float
    raw: dict[str, Any]
    #: run_observed only: every task's runs, the cycles, starts and evictions decided
    segments: list[Segment] = field(default_factory=list)
    cycles: int = 0
    starts: int = 0
    evictions: int = 0
    #: run_observed only: seconds to validate and build the scenario
    build_seconds: float = 0.0
    #: CPU seconds of this process over the same span as ``wall_seconds`` (on a shared machine
    #: the steadier number)
    cpu_seconds: float = 0.0


def run_document(document: dict[str, Any], until: float | None = None) -> RunOutcome:
    """``aipaas simulate run -f <document as JSON> -o json [--until]``, in this process."""
    from typer.main import get_command

    from aipaas.cli.app import app

    with tempfile.TemporaryDirectory(prefix="aipaas-bench-") as folder:
        path = Path(folder) / "scenario.json"
        path.write_text(json.dumps(document, separators=(",", ":")))
        args = ["simulate", "run", "-f", str(path), "-o", "json"]
        if until is not None:
            args += ["--until", f"{until:g}"]
        out = io.StringIO()
        started, cpu = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(out):
            try:
                get_command(app).main(args=args, prog_name="aipaas", standalone_mode=False)
            except SystemExit as stop:  # typer.Exit inside the command
                if stop.code not in (0, None):
                    raise RuntimeError(f"simulate run exited {stop.code}") from stop
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu
    text = out.getvalue()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise RuntimeError(f"simulate run printed no JSON: {text[:500]!r}") from err
    outcome = RunOutcome(_jobs(raw), raw.get("queues", {}), wall, raw)
    outcome.cpu_seconds = cpu
    return outcome


def run_observed(document: dict[str, Any], until: float | None = None) -> RunOutcome:
    """The scenario through ``ScenarioRun`` in memory, every task's runs recorded."""
    from aipaas.sim.scenario import validate_document
    from aipaas.sim.scenario_build import build_scenario

    started, cpu = time.perf_counter(), time.process_time()
    scenario = build_scenario(validate_document(document), honour_arrivals=True)
    built = time.perf_counter()
    runner = _observer(scenario)
    raw = runner.run(until)
    wall = time.perf_counter() - started
    runner.close_all()
    outcome = RunOutcome(_jobs(raw), raw.get("queues", {}), wall, raw, runner.segments)
    outcome.cycles, outcome.starts, outcome.evictions = runner.cycles, runner.starts, runner.evicted
    outcome.build_seconds = built - started
    outcome.cpu_seconds = time.process_time() - cpu
    return outcome


def _observer(scenario: Any) -> Any:
    """A ScenarioRun that records task runs from its cycles' decisions and its completions."""
    from aipaas.scheduler.batch.model import Decisions, Job
    from aipaas.sim.scenario_run import ScenarioRun

    class Observed(ScenarioRun):
        def __init__(self, scenario: Any) -> None:
            super().__init__(scenario)
            self.open: dict[tuple[str, str], tuple[float, int, int]] = {}
            self.segments: list[Segment] = []
            self.starts = 0
            self.evicted = 0

        def _close(self, job: str, task: str, end: float, evicted: bool) -> None:
            start, gpu, cpu = self.open.pop((job, task))
            self.segments.append(Segment(job, start, end, gpu, cpu, evicted))

        def _cycle(self) -> Decisions:
            decisions: Decisions = super()._cycle()
            for eviction in decisions.evicted:
                self._close(eviction.job, eviction.task, self.now, True)
            for start in decisions.started:
                where = start.placement
                self.open[(start.job, start.task)] = (
                    self.now,
                    where.gpu_milli * len(where.gpus),
                    where.cpu_milli,
                )
            self.starts += len(decisions.started)
            self.evicted += len(decisions.evicted)
            return decisions

        def _finish(self, key: str, job: Job, time: float) -> None:
            for task in job.tasks:
                if (key, task.name) in self.open:
                    self._close(key, task.name, time, False)
            super()._finish(key, job, time)

        def close_all(self) -> None:
            """Runs still open at the end (``until``) end at the clock."""
            for job, task in list(self.open):
                self._close(job, task, self.now, False)

    return Observed(scenario)


def _jobs(raw: dict[str, Any]) -> dict[str, JobOutcome]:
    return {
        key: JobOutcome(
            float(job["submitted"]),
            None if job.get("started") is None else float(job["started"]),
            None if job.get("finished") is None else float(job["finished"]),
            int(job.get("evictions", 0)),
            str(job.get("phase", "")),
        )
        for key, job in raw["jobs"].items()
    }


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all are equal, 1/n when one has everything."""
    total = sum(values)
    squares = sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares > 0 else 1.0
