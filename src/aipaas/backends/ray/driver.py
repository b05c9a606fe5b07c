"""Runs each task as a process inside a detached, named Ray actor on the node aipaas chose.

The controller has already placed every task of a gang (nodes and GPUs), so each actor is
pinned to its node with ``NodeAffinitySchedulingStrategy(soft=False)``: Ray only checks and
accounts the resources (``num_gpus``, fractions included: Ray's fractional GPUs) and never moves
the work elsewhere. Ray gives the actor its GPU ids, which become the task's
``CUDA_VISIBLE_DEVICES``.

Crash safety: an actor is named by the task's request id (namespace ``aipaas``) and detached,
so it outlives the controller; a restarted controller finds it by name (``get_if_exists``: a
second start never makes a second actor). The controller-side record (``run_dir/<id>/``) says a
start was asked and, once seen, the exit code: the actor is ended only after its exit code is
on disk, so a status asked again (level-triggered) still answers.

Status never blocks the controller for long: the actors are asked at once and answers not in
within ``poll_seconds`` count as still running (an actor Ray is still starting), for at most
``start_seconds`` after the start: an actor that never answered by then (Ray could not place
it: its resources taken by work that is not aipaas's) is ended and its task lost. An actor that
is gone (its node removed or dead, killed) without a recorded exit code is a lost task.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray
from ray import cloudpickle
from ray.exceptions import GetTimeoutError, RayActorError, RayError
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from aipaas.backends.base import Inventory, LaunchRequest, TaskState, TaskStatus
from aipaas.backends.gang import gang_of
from aipaas.backends.local.nvml import DRIVER
from aipaas.backends.ray import actor as actor_module
from aipaas.backends.ray.datasets_driver import RayNodeLoads
from aipaas.backends.ray.groups import Groups
from aipaas.backends.ray.inventory import RayNode, node_name, nodes_of, slices_of
from aipaas.backends.ray.records import GONE, TaskRecords

log = logging.getLogger(__name__)

NAMESPACE = "aipaas"
ACTOR_PREFIX = "aipaas-task-"
#: where a task without a workingDir runs, on its node (one directory per attempt)
DEFAULT_TASK_ROOT = "/tmp/aipaas-ray-tasks"
TASK_PATH = "/usr/local/bin:/usr/bin:/bin"
#: how long a node where an actor was lost is checked (Ray's own verdict comes within this)
SUSPECT_SECONDS = 60.0
ENDED = (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.LOST)


def actor_name(request_id: str) -> str:
    return ACTOR_PREFIX + request_id


def gpu_request(request: LaunchRequest) -> float:
    """Ray's ``num_gpus`` for a task: its whole GPUs, or the fraction of one it was given."""
    whole = len(request.gpus) or sum(1 for d in request.devices if d.driver == DRIVER)
    if whole == 1 and 0 < request.gpu_milli < 1000:
        return request.gpu_milli / 1000
    return float(whole)


class RayDriver(RayNodeLoads):  # dataset loads: ray/datasets_driver.py
    name = "ray"

    def __init__(
        self,
        run_dir: Path,
        address: str | None = None,
        *,
        task_root: str = DEFAULT_TASK_ROOT,
        poll_seconds: float = 0.5,
        start_seconds: float = 300.0,
    ) -> None:
        """Args:
        run_dir: the controller's records of the tasks it started (one directory per id).
        address: the Ray cluster (``host:port`` of its GCS, or ``ray://``); None: RAY_ADDRESS
            or a cluster started on this host.
        poll_seconds: the most a status call waits for the actors' answers.
        start_seconds: how long an actor may take to answer its first poll (Ray placing and
            starting it) before its task is given up as lost.
        """
        self.records = TaskRecords(run_dir)
        self.groups = Groups(self.records)
        self._runner: Any = None  # the actor class, made once (it is shipped by value)
        self.run_dir = self.records.run_dir
        self.address = address
        self.task_root = task_root
        self.poll_seconds = poll_seconds
        self.start_seconds = start_seconds
        self._connected = False
        self._owns_connection = False
        self._nodes: dict[str, RayNode] = {}
        self._handles: dict[str, Any] = {}
        self._pending: dict[str, Any] = {}  # request id -> a poll not yet answered
        self._lock = threading.Lock()
        #: nodes where an actor was lost, since when: Ray takes its health checks' time (15 s
        #: by default) to call a dead node dead, and until then a replacement would go there
        self._suspect: dict[str, float] = {}
        #: nodes Ray has called dead: an actor there cannot run, though Ray may still list it
        #: alive (and leave its polls unanswered) for a while after
        self._dead: set[str] = set()

    # the Backend interface ----------------------------------------------------------------

    def inventory(self) -> Inventory:
        self.connect()
        entries = ray.nodes()
        nodes = nodes_of(entries)
        gone = set(self._nodes) | {node_name(e) for e in entries if not e.get("Alive", False)}
        self._nodes = {n.info.name: n for n in nodes}
        self._dead = (self._dead | gone) - set(self._nodes)
        gpus = any(n.info.gpu_count for n in nodes)
        features = {"processes", "ray"} | ({"gpu"} if gpus else set())
        return Inventory(
            tuple(n.info for n in nodes),
            frozenset(features),
            tuple(slices_of(nodes)),
            unknown=frozenset(self._failing(nodes)),
        )

    def start(self, request: LaunchRequest) -> None:
        rid = request.request_id
        self.records.dir(rid).mkdir(exist_ok=True)
        if self.records.has(rid, "created") or self.records.has(rid, "exit"):
            return  # already started (by this process or an earlier one)
        self.connect()
        node = self._nodes.get(request.node)
        if node is None:
            self.inventory()
            node = self._nodes.get(request.node)
        if node is None:
            raise ValueError(f"the Ray cluster has no live node {request.node}")
        if request.node in self._suspect and not _answers(node):
            raise ValueError(f"the Ray node {request.node} does not answer (lost an actor lately)")
        gang = gang_of(request)
        if gang is not None and any(m.node not in self._nodes for m in gang.members):
            self.inventory()  # a node of the gang that this driver has not seen yet
        spec = self._spec(request)
        # A start that got this far before (a crash) may have made the actor: look it up by
        # name then; a first start does not ask Ray (one round trip less per task).
        repeated = self.records.has(rid, "request.json")
        self.records.mark(rid, "request.json", json.dumps({"node": node.info.name}))
        # The gang's placement group holds the task's CPUs and GPUs on its node (groups.py);
        # the actor asks for exactly its bundle.
        placement = self.groups.place(request, self._nodes, gpu_request(request))
        if self._runner is None:
            self._runner = ray.remote(actor_module.TaskRunner)
        self._runner.options(
            name=actor_name(rid),
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=repeated,  # a start repeated after a crash finds the first actor
            max_restarts=0,  # a restarted actor would run the command a second time
            num_cpus=placement.resources.get("CPU", 0.0),
            num_gpus=placement.resources.get("GPU", 0.0),
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement.group,
                placement_group_bundle_index=placement.bundle,
                placement_group_capture_child_tasks=False,
            ),
        ).remote(spec)
        self.records.mark(rid, "created")

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        if not self.records.dir(request_id).exists() or self.records.has(request_id, "exit"):
            return
        self.records.mark(request_id, "stop")
        handle = self._handle(request_id)
        if handle is not None:
            handle.stop.remote(grace_seconds)  # answered by the next status's poll

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        answers: dict[str, TaskStatus] = {}
        ask: list[str] = []
        for rid in request_ids:
            known = self.records.recorded(rid)
            if known is not None:
                answers[rid] = known
            else:
                ask.append(rid)
        if not ask:
            return answers
        self.connect()
        alive = self._alive_names()
        polls: dict[str, Any] = {}
        for rid in ask:
            on_dead_node = self.records.node(rid) in self._dead
            handle = self._handle(rid) if actor_name(rid) in alive and not on_dead_node else None
            if handle is None:
                answers[rid] = self._gone(rid)
                continue
            with self._lock:
                ref = self._pending.get(rid) or handle.poll.remote()
                self._pending[rid] = ref
            polls[rid] = ref
        ready: set[Any] = set()
        if polls:
            # Wait only for actors that answered before (a live one answers in milliseconds);
            # one Ray is still starting answers later, and until then it counts as running:
            # waiting for it would hold the whole controller cycle up.
            seen = [ref for rid, ref in polls.items() if self.records.has(rid, "answered")]
            if seen:
                ray.wait(seen, num_returns=len(seen), timeout=self.poll_seconds)
            refs = list(polls.values())
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            ready = set(done)
        for rid, ref in polls.items():
            answers[rid] = self._answer(rid, ref, ref in ready)
        for rid, answer in answers.items():
            if answer.state in ENDED and self.records.dir(rid).exists():
                self.groups.release(rid)  # the last task of its group removes the group
        return answers

    def close(self) -> None:
        with self._lock:
            self._handles.clear()
            self._pending.clear()
        if self._owns_connection and ray.is_initialized():
            ray.shutdown()  # the actors are detached: they keep running
        self._connected = self._owns_connection = False

    # helpers ------------------------------------------------------------------------------

    def connect(self) -> None:
        if self._connected:
            return
        # Shipped by value: the cluster's workers need not have aipaas installed.
        cloudpickle.register_pickle_by_value(actor_module)
        if not ray.is_initialized():
            ray.init(
                address=self.address,
                namespace=NAMESPACE,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
            self._owns_connection = True
        self._connected = True

    def _spec(self, request: LaunchRequest) -> dict[str, Any]:
        cwd = request.working_dir or f"{self.task_root}/{request.request_id}"
        env = {
            "PATH": os.environ.get("PATH") or TASK_PATH,
            "LANG": os.environ.get("LANG") or "C.UTF-8",
            "HOME": cwd,
        }
        env.update(request.env)
        env["PYTHONUNBUFFERED"] = "1"
        master = self._nodes.get(env.get("MASTER_ADDR", ""))
        if master is not None and master.address:
            env["MASTER_ADDR"] = master.address  # a node's name is not an address
        return {
            "command": list(request.command),
            "env": env,
            "cwd": cwd,
            "log_path": request.log_path,
        }

    def _answer(self, rid: str, ref: Any, ready: bool) -> TaskStatus:
        if not ready:
            return self._unanswered(rid)
        if not self.records.has(rid, "answered"):
            self.records.mark(rid, "answered")  # it ran: no start deadline any more
        with self._lock:
            self._pending.pop(rid, None)
        try:
            code = ray.get(ref, timeout=0)
        except (RayActorError, GetTimeoutError):
            return self._gone(rid)
        except RayError as err:  # Ray refused the actor (unschedulable): its reason says why
            self._finish(rid)
            self.records.mark(rid, "lost", f"Ray did not start the actor: {err}"[:500])
            return self._gone(rid)
        if code is None:
            return TaskStatus(rid, TaskState.RUNNING)
        self.records.mark(rid, "exit", f"{int(code)}\n")  # before the actor is ended
        self._finish(rid)
        recorded = self.records.recorded(rid)
        assert recorded is not None
        return recorded

    def _unanswered(self, rid: str) -> TaskStatus:
        """Running, unless the actor never answered within ``start_seconds`` of its start."""
        if (
            self.records.has(rid, "answered")
            or self.records.since_created(rid) < self.start_seconds
        ):
            return TaskStatus(rid, TaskState.RUNNING, message="the Ray actor has not answered")
        unplaced = self.groups.state(rid) == "PENDING"
        handle = self._handle(rid)
        if handle is not None:
            ray.kill(handle, no_restart=True)
        with self._lock:
            self._handles.pop(rid, None)
            self._pending.pop(rid, None)
        what = (
            "Ray could not place the task's placement group"
            if unplaced
            else ("Ray did not start the actor")
        )
        self.records.mark(
            rid,
            "lost",
            f"{what} within {self.start_seconds:g} s (its node lacks the resources Ray accounts)",
        )
        return self._gone(rid)

    def _gone(self, rid: str) -> TaskStatus:
        """No live actor and no recorded exit code; a lost actor's node is checked."""
        with self._lock:
            self._handles.pop(rid, None)
            self._pending.pop(rid, None)
        answer = self.records.gone(rid)
        node = self.records.node(rid)
        if answer.message == GONE and node is not None:
            self._suspect[node] = time.monotonic()
        return answer

    def _failing(self, nodes: Sequence[RayNode]) -> list[str]:
        """Nodes Ray still lists as alive where an actor was lost lately and whose raylet does
        not answer a connection: not ready (nothing new goes there) until Ray says."""
        now = time.monotonic()
        failing = []
        for node in nodes:
            since = self._suspect.get(node.info.name)
            if since is None:
                continue
            if now - since > SUSPECT_SECONDS or _answers(node):
                del self._suspect[node.info.name]
            else:
                failing.append(node.info.name)
        return failing

    def _finish(self, rid: str) -> None:
        handle = self._handle(rid)
        with self._lock:
            self._handles.pop(rid, None)
        if handle is not None:
            handle.finish.remote()  # kills what is left of the group, then the actor exits

    def _handle(self, rid: str) -> Any:
        with self._lock:
            handle = self._handles.get(rid)
        if handle is not None:
            return handle
        try:
            handle = ray.get_actor(actor_name(rid), namespace=NAMESPACE)
        except ValueError:  # no live actor of that name
            return None
        with self._lock:
            self._handles[rid] = handle
        return handle

    def _alive_names(self) -> set[str]:
        listed = ray.util.list_named_actors(all_namespaces=True)
        return {
            str(a["name"])
            for a in listed
            if isinstance(a, dict) and a.get("namespace") == NAMESPACE
        }


def _answers(node: RayNode, timeout: float = 0.2) -> bool:
    """The node's raylet accepts a connection (a killed one refuses at once)."""
    if not node.address or not node.raylet_port:
        return True  # nothing to check: Ray's own health checks decide
    try:
        with socket.create_connection((node.address, node.raylet_port), timeout=timeout):
            return True
    except OSError:
        return False
