"""What already runs at a scenario's ``now``: each listed task held on its node, through the
engine (``SnapshotCluster.hold`` with a Placement), in the order listed.

GPUs are picked as a person would write them down: the first free ones of the node (for a
fraction of a GPU, the first GPU with that much left). A node that cannot hold a task (too
little GPU, CPU or memory, or another GPU model) is an error naming the entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from aipaas.errors import FieldError, InvalidObject
from aipaas.scheduler.batch.model import Job
from aipaas.scheduler.framework.gpu_share import fitting_gpus, share_memory
from aipaas.scheduler.framework.types import MILLI_PER_GPU, Placement

if TYPE_CHECKING:
    from aipaas.scheduler.batch.cluster import SnapshotCluster
    from aipaas.sim.scenario import Running


def hold_running(engine: SnapshotCluster, job: Job, entry: Running, where: str, now: float) -> None:
    """Place ``entry``'s tasks of ``job`` on their nodes, running since ``entry.since``."""
    if entry.since > now:
        raise InvalidObject(
            [FieldError(f"{where}.since", f"{entry.since:g} is after now ({now:g})")]
        )
    tasks = {task.name: task for task in job.tasks}
    state = engine.state
    for task_name, node in entry.nodes.items():
        path = f"{where}.nodes.{task_name}"
        task = tasks.get(task_name)
        if task is None:
            names = ", ".join(tasks)
            raise InvalidObject(
                [FieldError(path, f"job {job.key} has no task {task_name} (its tasks: {names})")]
            )
        index = state.index_of.get(node)
        if index is None:
            raise InvalidObject([FieldError(path, f"no node {node} in spec.nodes")])
        request = task.request
        spec = state.nodes[index]
        if request.gpu_models and spec.gpu_model not in request.gpu_models:
            raise InvalidObject(
                [
                    FieldError(
                        path,
                        f"{job.key}/{task_name} asks for a {', '.join(request.gpu_models)} GPU; "
                        f"node {node} has {spec.gpu_model or 'none'}",
                    )
                ]
            )
        row = state.gpu_free[index, : spec.gpu_count]
        rows = np.array([index], dtype=np.int64)
        named = entry.gpus.get(task_name)
        if request.gpu_count == 0:
            gpus: list[int] = []
        elif named is not None:
            gpus = _named_gpus(named, row, request.gpu_milli, f"{where}.gpus.{task_name}")
        elif request.share is not None:
            gpus = [int(g) for g in np.flatnonzero(fitting_gpus(state, request, rows)[0])]
        elif request.gpu_milli >= MILLI_PER_GPU:
            gpus = [g for g in range(spec.gpu_count) if row[g] == MILLI_PER_GPU]
        else:
            gpus = [g for g in range(spec.gpu_count) if row[g] >= request.gpu_milli]
        problem = None
        if len(gpus) < request.gpu_count:
            problem = f"{request.gpu_count} GPU(s) asked, {len(gpus)} free"
        elif state.cpu_free[index] < request.cpu_milli:
            problem = f"{request.cpu_milli}m CPU asked, {int(state.cpu_free[index])}m free"
        elif state.memory_free[index] < request.memory_mib:
            problem = f"{request.memory_mib}Mi memory asked, {int(state.memory_free[index])}Mi free"
        if problem is not None:
            raise InvalidObject(
                [
                    FieldError(
                        path, f"node {node} is over-committed by {job.key}/{task_name}: {problem}"
                    )
                ]
            )
        placement = Placement(
            pod=request.name,
            node=node,
            node_index=index,
            gpus=tuple(gpus[: request.gpu_count]),
            gpu_milli=request.gpu_milli if request.gpu_count else 0,
            cpu_milli=request.cpu_milli,
            memory_mib=request.memory_mib,
            share=request.share is not None,
            gpu_memory_mib=share_memory(state, request.share, index) if request.share else 0,
        )
        engine.hold(placement)
        task.placement = placement
        task.since = entry.since
    job.started = entry.since
    job.ends_at = None if job.time_limit is None else entry.since + job.time_limit


def _named_gpus(named: list[int], row: np.ndarray, milli: int, path: str) -> list[int]:
    """The GPUs a running entry names, each with the task's share free (whole: all of it)."""
    need = min(milli, MILLI_PER_GPU)
    for index in named:
        if index >= len(row):
            raise InvalidObject([FieldError(path, f"GPU {index}: the node has {len(row)}")])
    return [g for g in named if row[g] >= need]
