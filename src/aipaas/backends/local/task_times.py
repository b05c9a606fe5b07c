"""When a local task really started and ended, read from its run directory's files.

The controller sees a task's start and end only at its cycles; a task that ends before the
cycle after its start was never seen running, had no start time and went unbilled (the usage
ledger enters an attempt with a start and an end). The run directory knows better: the
``pid`` file is written when the task's runner has started, the ``exit`` file when it ended.
Who calls it: backends/local/backend.py (``status``).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

from aipaas.backends.base import TaskState, TaskStatus

_ENDED = (TaskState.SUCCEEDED, TaskState.FAILED)


def _modified(path: Path) -> datetime | None:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError:
        return None


def with_run_times(answer: TaskStatus, directory: Path) -> TaskStatus:
    """An ended task's answer with its start (the runner's pid file) and end (its exit file)
    where those exist; any other answer as it is. A task refused before it started has no
    pid file: no start time, so nothing is billed for it."""
    if answer.state not in _ENDED:
        return answer
    started = _modified(directory / "pid")
    finished = _modified(directory / "exit")
    if started is None:
        return answer
    if finished is not None and finished < started:
        finished = started  # a pid file written again (a restarted server adopting its runner)
    return dataclasses.replace(answer, started_at=started, finished_at=finished)
