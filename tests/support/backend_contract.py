"""The backend contract (backends/base.py's module docstring), written once as tests that any
backend's harness runs: test_backend_conformance.py runs them against sim, local, the demo
composite, Slurm and Ray; tests/kube/test_kube_contract.py against Kubernetes.

A test module imports the ``test_*`` functions below and gives a ``harness`` fixture: a
``Harness`` builds the backend through its real constructor or registry over one state (a run
directory, a cluster), turns a ``Task`` (exit with this code after this long) into the
``LaunchRequest`` its backend runs, and plays the rest of the world where the backend's engine
does not run processes (the simulator's clock, the kubelet). A contract that cannot apply to a
backend is skipped with the harness's reason, never weakened.
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from aipaas.backends.base import Backend, FencingRefused, LaunchRequest, TaskState, TaskStatus

__all__ = [
    "Harness",
    "Task",
    "test_a_new_backend_object_reports_a_task_an_earlier_one_started",
    "test_a_second_start_of_one_request_id_runs_it_once",
    "test_a_stale_fencing_token_is_refused",
    "test_a_stopped_task_is_reported_ended",
    "test_a_task_ends_with_its_exit_code",
    "test_an_id_never_started_is_unknown",
]

#: states that say the task ended (stop contract: "status then reports the end")
ENDED = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.LOST})
#: a task that runs until it is stopped (longer than any test waits)
FOREVER = 300.0

#: the contracts' names, as harnesses name the ones that do not apply to them
EXIT_CODES = "exit codes"
IDEMPOTENT_START = "idempotent start"
UNKNOWN_ID = "unknown id"
STOP = "stop"
LEVEL_TRIGGERED = "level-triggered status"
FENCING = "fencing"


@dataclass(frozen=True)
class Task:
    """What a contract asks a task to do: run ``seconds``, then exit with ``exit_code``."""

    exit_code: int = 0
    seconds: float = 0.0


class Harness(ABC):
    """One backend under the contract, over one state that every ``make`` shares."""

    name: str
    #: contract -> why it does not apply to this backend (the test is skipped with it)
    not_applicable: ClassVar[Mapping[str, str]] = {}
    #: the most a task may take to reach a state the contract waits for
    wait_seconds: float = 40.0

    def __init__(self) -> None:
        self.made: list[Backend] = []

    def backend(self) -> Backend:
        """A new backend object over this harness's state (a restarted server makes one)."""
        made = self.make()
        self.made.append(made)
        return made

    @abstractmethod
    def make(self) -> Backend: ...

    @abstractmethod
    def request(self, rid: str, task: Task, *, fencing_token: int | None = None) -> LaunchRequest:
        """The request that runs ``task`` as ``rid`` on one node of the backend."""

    @abstractmethod
    def starts(self, rid: str) -> int:
        """How many times ``rid`` was really started (a file its command appends to, or the
        engine's own record where no command runs)."""

    def play(self) -> None:
        """What the world does between two status calls (nothing where real processes run)."""
        return

    def close(self) -> None:
        for made in self.made:
            made.close()

    def skip_unless(self, contract: str) -> None:
        reason = self.not_applicable.get(contract)
        if reason is not None:
            pytest.skip(f"{self.name}: {reason}")


def new_id(what: str) -> str:
    """A request id as the controller makes them (``<job uid>.<task>.<attempt>``), unique per
    test so that tasks of a cluster shared by a module's tests never meet."""
    return f"{what}-{uuid.uuid4().hex[:8]}.w-0.0"


def shell_task(task: Task, started: Path) -> tuple[str, ...]:
    """The command of a task that runs real processes: it appends one line to ``started``
    (how many times it ran), runs ``task.seconds``, then exits with ``task.exit_code``."""
    sleep = f"sleep {task.seconds:g}; " if task.seconds else ""
    return ("/bin/sh", "-c", f"echo started >> {started}; {sleep}exit {task.exit_code}")


def wait_until(
    harness: Harness, backend: Backend, rid: str, done: frozenset[TaskState]
) -> TaskStatus:
    deadline = time.monotonic() + harness.wait_seconds
    status = backend.status([rid])[rid]
    while status.state not in done:
        if time.monotonic() > deadline:
            raise AssertionError(f"{harness.name}: {rid} never reached {set(done)}: {status}")
        harness.play()
        time.sleep(0.1)
        status = backend.status([rid])[rid]
    return status


def wait_started(harness: Harness, rid: str) -> None:
    deadline = time.monotonic() + harness.wait_seconds
    while harness.starts(rid) == 0:
        if time.monotonic() > deadline:
            raise AssertionError(f"{harness.name}: {rid} never started its command")
        harness.play()
        time.sleep(0.1)


def test_a_task_ends_with_its_exit_code(harness: Harness) -> None:
    """Failures are data: an exit code is reported, never raised."""
    harness.skip_unless(EXIT_CODES)
    backend = harness.backend()
    ok, bad = new_id("exit0"), new_id("exit3")
    backend.start(harness.request(ok, Task(exit_code=0)))
    backend.start(harness.request(bad, Task(exit_code=3)))
    succeeded = wait_until(harness, backend, ok, ENDED)
    failed = wait_until(harness, backend, bad, ENDED)
    assert (succeeded.state, succeeded.exit_code) == (TaskState.SUCCEEDED, 0), succeeded
    assert (failed.state, failed.exit_code) == (TaskState.FAILED, 3), failed


def test_a_second_start_of_one_request_id_runs_it_once(harness: Harness) -> None:
    """``start`` is idempotent by request id, also across backend objects (a restarted
    server asks again for what it does not know it started)."""
    harness.skip_unless(IDEMPOTENT_START)
    backend = harness.backend()
    rid = new_id("twice")
    request = harness.request(rid, Task(seconds=2))
    backend.start(request)
    backend.start(request)
    wait_until(harness, backend, rid, frozenset({TaskState.RUNNING, *ENDED}))
    harness.backend().start(request)
    ended = wait_until(harness, backend, rid, ENDED)
    assert ended.state is TaskState.SUCCEEDED, ended
    assert harness.starts(rid) == 1


def test_an_id_never_started_is_unknown(harness: Harness) -> None:
    harness.skip_unless(UNKNOWN_ID)
    backend = harness.backend()
    rid = new_id("never")
    assert backend.status([rid])[rid].state is TaskState.UNKNOWN
    backend.stop(rid)  # stopping what never ran is no error, and starts nothing
    assert backend.status([rid])[rid].state is TaskState.UNKNOWN


def test_a_stopped_task_is_reported_ended(harness: Harness) -> None:
    """``stop`` is asynchronous: it returns, and a later status reports the end."""
    harness.skip_unless(STOP)
    backend = harness.backend()
    rid = new_id("stop")
    backend.start(harness.request(rid, Task(seconds=FOREVER)))
    wait_until(harness, backend, rid, frozenset({TaskState.RUNNING}))
    backend.stop(rid, grace_seconds=1)
    ended = wait_until(harness, backend, rid, ENDED)
    assert ended.state is not TaskState.SUCCEEDED, ended  # it did not run to its end


def test_a_new_backend_object_reports_a_task_an_earlier_one_started(harness: Harness) -> None:
    """``status`` is level-triggered: a backend object made after the start (a restarted
    server) reports the task, running and then ended, without starting it again."""
    harness.skip_unless(LEVEL_TRIGGERED)
    first = harness.backend()
    rid = new_id("restart")
    first.start(harness.request(rid, Task(seconds=FOREVER)))
    wait_until(harness, first, rid, frozenset({TaskState.RUNNING}))
    wait_started(harness, rid)  # its command runs (running may be said of the launcher first)
    first.close()  # the server's process ends; running tasks keep running
    second = harness.backend()
    assert second.status([rid])[rid].state is TaskState.RUNNING
    second.stop(rid, grace_seconds=1)
    wait_until(harness, second, rid, ENDED)
    assert harness.starts(rid) == 1


def test_a_stale_fencing_token_is_refused(harness: Harness) -> None:
    """A start whose token is below the highest seen comes from a controller whose lease was
    taken over: refused (``FencingRefused``), by this backend object and by a new one, and
    the refused task never runs; the current token still starts."""
    harness.skip_unless(FENCING)
    backend = harness.backend()
    current, stale, later = new_id("token7"), new_id("token6"), new_id("token7b")
    backend.start(harness.request(current, Task(), fencing_token=7))
    with pytest.raises(FencingRefused):
        backend.start(harness.request(stale, Task(), fencing_token=6))
    with pytest.raises(FencingRefused):
        harness.backend().start(harness.request(stale, Task(), fencing_token=6))
    with pytest.raises(FencingRefused):  # no token once a token was seen: refused too
        backend.start(harness.request(stale, Task(), fencing_token=None))
    backend.start(harness.request(later, Task(), fencing_token=7))
    assert wait_until(harness, backend, current, ENDED).state is TaskState.SUCCEEDED
    assert wait_until(harness, backend, later, ENDED).state is TaskState.SUCCEEDED
    assert backend.status([stale])[stale].state is TaskState.UNKNOWN
    assert harness.starts(stale) == 0
