"""The backend's supervisor in the Ray cluster: one detached, named actor that submits the
tasks (runner.py's ``run_task``, plain Ray tasks on reused workers) and answers for all of them
in one call.

Why an actor: a Ray task shares its fate with its owner, the process that submitted it. The
server's driver process dies with the server (kill -9 included), so the tasks must be owned
by something that outlives it: this actor, detached (it outlives the driver that made it) and
named (one per driver process, supervisors.py: a restarted driver finds it, and the tasks it
still holds, by name). It lives on the cluster's head node, whose loss ends the cluster anyway;
should it die, its tasks die with it (Ray ends the workers of a dead owner) and the backend
reports them lost.

It keeps, per request id: the task's reference (its result is the exit code), whether the task
started (the runner's notice, with its pid, GPU ids and node), a stop asked for, and the result
once in. ``start`` is idempotent by request id (a start repeated after a crash submits nothing).
A result is kept until the backend, having written it down, says ``forget``.

Calls run out of order (an async actor): a poll may come before the start sent just before it
(the backend counts such a task as not started yet), a stop before its start (remembered).

This module is shipped by value (cloudpickle) with runner.py: it imports the standard library
and ``ray`` only (present in every Ray worker).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from aipaas.backends.ray.runner import run_task

SUPERVISOR_NAME = "aipaas-supervisor"
#: a custom resource only the head node has (Ray's own): the supervisor lives there
HEAD_RESOURCE = "node:__internal_head__"


class _Task:
    """One submitted task, as the supervisor knows it."""

    def __init__(self, ref: Any) -> None:
        self.ref = ref
        self.info: dict[str, Any] | None = None  # set when the task started on its node
        self.result: dict[str, Any] | None = None  # {"state": "exit"|"error", ...}
        self.grace: float | None = None  # a stop asked for, with its grace period
        self.stop_asked = asyncio.Event()
        self.watcher: asyncio.Task[None] | None = None


class TaskSupervisor:
    """An async actor: its methods run on one event loop, none blocks."""

    def __init__(self) -> None:
        import ray

        self._tasks: dict[str, _Task] = {}
        #: stops that came before their start (an async actor runs calls out of order)
        self._early_stops: set[str] = set()
        self._runner = ray.remote(run_task)
        #: set when a task ended: ``changed`` answers (the driver's wake-up call; a start is
        #: seen by the next poll: waking the controller for each cost more CPU than it saved)
        self._changed = asyncio.Event()

    async def start(self, request_id: str, spec: dict[str, Any], placement: dict[str, Any]) -> None:
        """Submits the task into its bundle (``group``, ``bundle``, ``CPU``, ``GPU``), or, for
        a task alone (``group`` None), onto its node (``node_id``)."""
        if request_id in self._tasks:
            return  # a start repeated after a crash: the task is already here
        if request_id in self._early_stops:  # stopped before it started: never runs
            task = self._tasks[request_id] = _Task(None)
            task.result = {"state": "error", "message": "stopped before it started"}
            return
        import ray
        from ray.util.scheduling_strategies import (
            NodeAffinitySchedulingStrategy,
            PlacementGroupSchedulingStrategy,
        )

        me = ray.get_runtime_context().current_actor
        strategy: Any
        if placement.get("group") is None:  # a task alone: on its node, never elsewhere
            strategy = NodeAffinitySchedulingStrategy(str(placement["node_id"]), soft=False)
        else:
            strategy = PlacementGroupSchedulingStrategy(
                placement["group"],
                placement_group_bundle_index=int(placement["bundle"]),
                placement_group_capture_child_tasks=False,
            )
        ref = self._runner.options(
            name=f"aipaas-task-{request_id}",
            num_cpus=float(placement["CPU"]),
            num_gpus=float(placement["GPU"]),
            max_retries=0,  # a retry would run the command a second time: the controller decides
            retry_exceptions=False,
            scheduling_strategy=strategy,
        ).remote(me, request_id, spec)
        task = _Task(ref)
        self._tasks[request_id] = task
        task.watcher = asyncio.ensure_future(self._watch(task))

    async def poll(self, request_ids: list[str]) -> dict[str, Any]:
        """``tasks``: per id, ``unknown`` (never submitted here), ``pending`` (Ray has not
        started it), ``running`` (with its info), or its result (``exit`` with the code,
        ``error``); ``held``: how many tasks it holds."""
        answers: dict[str, dict[str, Any]] = {}
        for rid in request_ids:
            task = self._tasks.get(rid)
            if task is None:
                answers[rid] = {"state": "unknown"}
            elif task.result is not None:
                answers[rid] = {**task.result, "started": task.info is not None}
            elif task.info is None:
                answers[rid] = {"state": "pending"}
            else:
                answers[rid] = {"state": "running", "info": task.info}
        return {"tasks": answers, "held": len(self._tasks)}

    async def started(self, request_id: str, info: dict[str, Any]) -> None:
        task = self._tasks.get(request_id)
        if task is not None:
            task.info = info

    async def changed(self, seconds: float) -> bool:
        """Answers True as soon as a task ended since the last True (at once when one did
        meanwhile), False after ``seconds`` without: the driver holds this call so that the
        controller hears of an end without waiting for its next poll."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._changed.wait(), seconds)
        if not self._changed.is_set():
            return False
        self._changed.clear()
        return True

    async def wait_stop(self, request_id: str, info: dict[str, Any] | None = None) -> float | None:
        """Answered when a stop is asked (its grace period) or the task is forgotten (None).
        ``info``: the task started (as ``started`` says; one call where there were two)."""
        task = self._tasks.get(request_id)
        if task is None:
            return None
        if info is not None:
            task.info = info
        await task.stop_asked.wait()
        return task.grace

    async def stop(self, request_id: str, grace_seconds: float) -> None:
        """The running task stops its command (SIGTERM, SIGKILL after the grace); one Ray has
        not started yet is cancelled (it never runs)."""
        import ray

        task = self._tasks.get(request_id)
        if task is None:
            self._early_stops.add(request_id)
            return
        if task.result is not None or task.grace is not None:
            return
        task.grace = grace_seconds
        task.stop_asked.set()
        if task.info is None:
            with contextlib.suppress(Exception):
                ray.cancel(task.ref, force=False)

    async def cancel(self, request_ids: list[str]) -> None:
        """Given up (a dead node, a start deadline passed): its worker is killed if it runs."""
        import ray

        for rid in request_ids:
            task = self._tasks.get(rid)
            if task is not None and task.result is None:
                with contextlib.suppress(Exception):
                    ray.cancel(task.ref, force=True)

    async def forget(self, request_ids: list[str]) -> None:
        """The backend wrote these results down."""
        for rid in request_ids:
            task = self._tasks.pop(rid, None)
            if task is not None:
                task.stop_asked.set()  # a runner still waiting for a stop: none comes

    async def tasks(self) -> list[str]:
        """The request ids held (tests count them: one per start, never two)."""
        return sorted(self._tasks)

    async def _watch(self, task: _Task) -> None:
        try:
            code = await task.ref
        except Exception as err:  # cancelled, its worker or node died, Ray refused it
            task.result = {"state": "error", "message": f"{type(err).__name__}: {err}"[:500]}
        else:
            task.result = {"state": "exit", "code": int(code)}
        self._changed.set()
