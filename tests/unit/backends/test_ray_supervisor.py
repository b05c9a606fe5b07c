"""The supervisor actor's bookkeeping (supervisor.py), as a plain object on an event loop: Ray
runs an async actor's calls out of order, so a poll or a stop may come before the start sent
just before it. The Ray side (submitting, results) is covered by the integration tests."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("ray", reason="ray is not installed (the ray extra; scripts/setup.sh)")

from aipaas.backends.ray.supervisor import TaskSupervisor

SPEC = {"command": ["true"], "env": {}, "cwd": "/tmp", "log_path": "/tmp/x.log"}


def test_a_task_never_submitted_is_unknown_and_holds_nothing() -> None:
    supervisor = TaskSupervisor()
    answer = asyncio.run(supervisor.poll(["a.w-0.0"]))
    assert answer == {"tasks": {"a.w-0.0": {"state": "unknown"}}, "held": 0}


def test_a_stop_that_comes_before_its_start_keeps_the_task_from_running() -> None:
    supervisor = TaskSupervisor()

    async def calls() -> dict[str, object]:
        await supervisor.stop("a.w-0.0", 5.0)  # came first
        await supervisor.start("a.w-0.0", SPEC, {})  # submits nothing (no Ray call made)
        await supervisor.start("a.w-0.0", SPEC, {})  # repeated: still nothing
        return await supervisor.poll(["a.w-0.0"])

    answer = asyncio.run(calls())
    tasks = answer["tasks"]
    assert isinstance(tasks, dict)
    assert tasks["a.w-0.0"] == {
        "state": "error",
        "message": "stopped before it started",
        "started": False,
    }
    assert answer["held"] == 1


def test_forgotten_results_are_dropped_and_their_stop_waiters_released() -> None:
    supervisor = TaskSupervisor()

    async def calls() -> tuple[float | None, dict[str, object]]:
        await supervisor.stop("a.w-0.0", 5.0)
        await supervisor.start("a.w-0.0", SPEC, {})
        waiter = asyncio.ensure_future(supervisor.wait_stop("a.w-0.0"))
        await supervisor.forget(["a.w-0.0"])
        return await waiter, await supervisor.poll(["a.w-0.0"])

    grace, answer = asyncio.run(calls())
    assert grace is None  # no stop was asked of a started task: forgotten
    assert answer == {"tasks": {"a.w-0.0": {"state": "unknown"}}, "held": 0}


def test_changed_answers_once_a_task_ended_and_not_before() -> None:
    """The driver holds ``changed``: it answers True as soon as a task ends (and once per
    change), False when nothing changed in its time."""
    from aipaas.backends.ray.supervisor import _Task

    supervisor = TaskSupervisor()

    async def calls() -> tuple[bool, bool, bool, dict[str, object]]:
        quiet = await supervisor.changed(0.01)
        loop = asyncio.get_running_loop()
        ref: asyncio.Future[int] = loop.create_future()
        task = supervisor._tasks["a.w-0.0"] = _Task(ref)
        task.watcher = asyncio.ensure_future(supervisor._watch(task))
        held = asyncio.ensure_future(supervisor.changed(60))
        await asyncio.sleep(0)
        assert not held.done()  # nothing ended yet: the call is held
        ref.set_result(3)  # the task's result: its exit code
        ended = await asyncio.wait_for(held, 60)
        again = await supervisor.changed(0.01)  # told once: nothing new since
        return quiet, ended, again, await supervisor.poll(["a.w-0.0"])

    quiet, ended, again, answer = asyncio.run(calls())
    assert (quiet, ended, again) == (False, True, False)
    tasks = answer["tasks"]
    assert isinstance(tasks, dict)
    assert tasks["a.w-0.0"] == {"state": "exit", "code": 3, "started": False}
