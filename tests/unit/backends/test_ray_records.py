"""The Ray driver's own records (``run_dir/<request id>/``): what it answers from them alone,
without asking Ray (and without connecting to it); the backend the registry builds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aipaas.backends.base import TaskState

pytest.importorskip("ray", reason="ray is not installed (the ray extra; scripts/setup.sh)")

import ray

from aipaas.backends.ray.backend import RayBackend
from aipaas.backends.ray.driver import RayDriver
from aipaas.backends.ray.registry import ray_backend


def backend(tmp_path: Path) -> RayDriver:
    # An address nothing listens on: a test that reached Ray would fail, not pass.
    return RayDriver(tmp_path / "run", "127.0.0.1:1")


def test_an_id_never_started_is_unknown_without_asking_ray(tmp_path: Path) -> None:
    answers = backend(tmp_path).status(["u.w-0.0"])
    assert answers["u.w-0.0"].state is TaskState.UNKNOWN
    assert not ray.is_initialized()


@pytest.mark.parametrize(
    ("code", "stopped", "state", "message"),
    [
        ("0\n", False, TaskState.SUCCEEDED, "exit code 0"),
        ("3\n", False, TaskState.FAILED, "exit code 3"),
        ("143\n", True, TaskState.FAILED, "stopped (exit code 143)"),
    ],
)
def test_a_recorded_exit_code_is_answered_from_the_record(
    tmp_path: Path, code: str, stopped: bool, state: TaskState, message: str
) -> None:
    made = backend(tmp_path)
    directory = made.run_dir / "u.w-0.0"
    directory.mkdir(parents=True)
    (directory / "exit").write_text(code)
    if stopped:
        (directory / "stop").touch()
    answer = made.status(["u.w-0.0"])["u.w-0.0"]
    assert (answer.state, answer.exit_code, answer.message) == (state, int(code), message)
    made.stop("u.w-0.0")  # an ended task: nothing to stop, nothing asked of Ray
    assert not ray.is_initialized()


def test_a_start_the_driver_refused_is_lost_with_its_reason(tmp_path: Path) -> None:
    """The backend does not await a start's answer: a start the driver refused (recorded as
    lost, never submitted) says why through the task's status; one never submitted for no
    recorded reason is lost as never started."""
    from aipaas.backends.ray.records import TaskRecords

    records = TaskRecords(tmp_path / "run")
    records.dir("r.w-0.0").mkdir()
    records.mark("r.w-0.0", "lost", "start failed: the Ray cluster has no live node x")
    records.dir("n.w-0.0").mkdir()
    refused, never = records.gone("r.w-0.0"), records.gone("n.w-0.0")
    assert refused.state is TaskState.LOST and never.state is TaskState.LOST
    assert refused.message == "start failed: the Ray cluster has no live node x"
    assert never.message == "never started in Ray"


def test_a_bad_request_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid request id"):
        backend(tmp_path).status(["../escape"])


def test_the_registry_fences_starts_and_keeps_records_apart(tmp_path: Path) -> None:
    made = ray_backend(tmp_path / "run", "127.0.0.1:1")
    assert made.name == "ray"
    inner = getattr(made, "inner", None)
    assert isinstance(inner, RayBackend) and inner.run_dir == (tmp_path / "run" / "ray").resolve()
    assert inner.driver_pid is None  # the driver process starts with the first call


def test_a_driver_that_cannot_connect_is_unreachable_then_retried_later(
    tmp_path: Path,
) -> None:
    """The cluster's head is down (here: nothing listens): each call waits at most
    ``ready_seconds`` (the controller's "unreachable"), the driver keeps trying until
    ``connect_seconds``, is then ended, and calls fail at once until ``retry_seconds`` passed;
    the server's process never imports ray's driver."""
    from aipaas.backends.ray.backend import RayUnreachable

    made = RayBackend(
        tmp_path / "run", "127.0.0.1:1", ready_seconds=0.5, connect_seconds=2, retry_seconds=60
    )
    made._ever_connected = True  # a driver that connected once and failed: its successor
    started = time.monotonic()
    with pytest.raises(RayUnreachable, match="connecting to Ray"):
        made.inventory()
    assert time.monotonic() - started < 5
    first = made.driver_pid
    assert first is not None  # still trying: the same driver at the next call
    time.sleep(2)
    with pytest.raises(RayUnreachable, match="did not connect in"):
        made.status(["u.w-0.0"])
    assert made.driver_pid is None
    with pytest.raises(RayUnreachable, match="failed lately"):
        made.status(["u.w-0.0"])
    made.close()
