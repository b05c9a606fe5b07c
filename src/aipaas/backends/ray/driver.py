"""The Ray driver: runs each task as a Ray task in its bundle of the gang's placement group, on
the node aipaas chose, submitted by the backend's supervisor actor (supervisor.py).

The controller has already placed every task of a gang (nodes and GPUs); the gang's placement
group (groups.py) pins each bundle to its node, so Ray only checks and accounts the resources
(``num_gpus``, fractions included: Ray's fractional GPUs) and never moves the work elsewhere.
Ray gives the task its GPU ids, which become the command's ``CUDA_VISIBLE_DEVICES``.

Why tasks under one supervisor and not an actor per task: an actor takes a new worker process
of its own (Ray never reuses one for an actor), about a second of CPU each; tasks reuse Ray's
workers. A task's fate is shared with its owner, so the owner is the detached supervisor
actor, which outlives this driver and the server: a restarted driver finds it by name, and a
start repeated after a crash is refused there by request id (never a second submission).

Crash safety: the controller-side record (``run_dir/<id>/``) says a start was asked and, once
seen, the exit code; the supervisor forgets a result only after it is on disk, so a status
asked again (level-triggered) still answers.

Status never blocks the controller for long: one call asks each supervisor about all its tasks
and is awaited at most ``poll_seconds`` (unanswered: unreachable, nothing concluded). A task is
Running once its command started on its node; before, it is not started yet (UNKNOWN with the
reason: the controller keeps it Starting) for at most ``start_seconds``: one still not started
by then (Ray could not place it: its resources taken by work that is not aipaas's) is
cancelled and its task lost. A task that ended without an exit code (its node removed or dead,
its worker killed) or that the supervisor does not know (the supervisor died) is a lost task.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ray
from ray import cloudpickle

from aipaas.backends import rendezvous
from aipaas.backends.base import Inventory, LaunchRequest, TaskState, TaskStatus
from aipaas.backends.expansion import expand_command
from aipaas.backends.gang import gang_of
from aipaas.backends.ray import runner as runner_module
from aipaas.backends.ray import supervisor as supervisor_module
from aipaas.backends.ray.datasets_driver import RayNodeLoads
from aipaas.backends.ray.groups import Groups
from aipaas.backends.ray.inventory import RayNode, node_name, nodes_of, slices_of
from aipaas.backends.ray.records import GONE, TaskRecords
from aipaas.backends.ray.supervisors import UNKNOWN, Supervisors
from aipaas.devices.drivers import NVIDIA_GPU as DRIVER

log = logging.getLogger(__name__)

NAMESPACE = "aipaas"
#: where a task without a workingDir runs, on its node (one directory per attempt)
DEFAULT_TASK_ROOT = "/tmp/aipaas-ray-tasks"
TASK_PATH = "/usr/local/bin:/usr/bin:/bin"
#: how long a node where a task was lost is checked (Ray's own verdict comes within this)
SUSPECT_SECONDS = 60.0
#: how long one ``changed`` call to the supervisor is held before it is made again
CHANGES_SECONDS = 10.0
ENDED = (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.LOST)
#: a task with an image on Ray: refused (Ray's runtime_env container needs podman on every
#: node and an image with Ray itself in it; neither is checked here), with this reason
IMAGE_REFUSAL = (
    "spec.tasks[].image: the Ray backend does not run container images; run the job on a "
    "local, Slurm or Kubernetes node (spec.nodeSelector aipaas.dev/backend)"
)
NOT_STARTED_CODE = 127


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
        poll_seconds: the most a status call waits for the supervisor's answer.
        start_seconds: how long Ray may take to start a task (placing its group, leasing a
            worker) before the task is given up as lost.
        """
        self.records = TaskRecords(run_dir)
        self.groups = Groups(self.records)
        self.run_dir = self.records.run_dir
        self.address = address
        self.task_root = task_root
        self.poll_seconds = poll_seconds
        self.start_seconds = start_seconds
        self._connected = False
        self._owns_connection = False
        self._nodes: dict[str, RayNode] = {}
        self.supervisors = Supervisors(self.run_dir, NAMESPACE, poll_seconds)
        #: nodes where a task was lost, since when: Ray takes its health checks' time (15 s
        #: by default) to call a dead node dead, and until then a replacement would go there
        self._suspect: dict[str, float] = {}
        #: nodes Ray has called dead: a task there cannot run, though Ray may not have told
        #: its owner yet
        self._dead: set[str] = set()
        #: called (from a thread of its own) when a task of this driver's supervisor ended:
        #: the server's controller then runs a cycle without waiting out its rest
        self.on_change: Callable[[], None] | None = None
        self._listening = False
        self._closing = False

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
        """Submits the task; one refused (ValueError: no such node, a group larger than its
        node) is recorded as lost with the reason, which its status says (the backend does
        not await a start's answer), and raised."""
        rid = request.request_id
        self.records.dir(rid).mkdir(exist_ok=True)
        if self.records.has(rid, "created") or self.records.has(rid, "exit"):
            return  # already started (by this process or an earlier one)
        if request.image is not None:  # refused for good: a new attempt would be refused again
            self.records.mark(rid, "refused", IMAGE_REFUSAL)
            self.records.mark(rid, "exit", f"{NOT_STARTED_CODE}\n")
            return
        try:
            self._start(request)
        except ValueError as err:
            self.records.mark(rid, "lost", f"start failed: {err}")
            raise

    def _start(self, request: LaunchRequest) -> None:
        rid = request.request_id
        self.connect()
        node = self._nodes.get(request.node)
        if node is None:
            self.inventory()
            node = self._nodes.get(request.node)
        if node is None:
            raise ValueError(f"the Ray cluster has no live node {request.node}")
        if request.node in self._suspect and not _answers(node):
            raise ValueError(f"the Ray node {request.node} does not answer (lost a task lately)")
        gang = gang_of(request)
        if gang is not None and any(m.node not in self._nodes for m in gang.members):
            self.inventory()  # a node of the gang that this driver has not seen yet
        spec = self._spec(request)
        self.records.mark(rid, "request.json", json.dumps({"node": node.info.name}))
        # The gang's placement group holds the task's CPUs and GPUs on its node (groups.py);
        # the task asks for exactly its bundle.
        placement = self.groups.place(request, self._nodes, gpu_request(request))
        where = {
            "group": placement.group,
            "bundle": placement.bundle,
            "CPU": placement.resources.get("CPU", 0.0),
            "GPU": placement.resources.get("GPU", 0.0),
            "node_id": placement.node_id,  # a task alone: pinned to its node
        }
        # Not awaited (a status that comes first counts it as not started yet). A start
        # repeated after a crash is a no-op there.
        name = self.supervisors.submit(rid, spec, where)
        self.records.mark(rid, "created", name)  # the supervisor that holds it
        self._listen()

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        if not self.records.dir(request_id).exists() or self.records.has(request_id, "exit"):
            return
        self.records.mark(request_id, "stop")
        holder = self.records.supervisor(request_id)
        if holder:
            self.connect()
            supervisor = self.supervisors.handle(holder)
            if supervisor is not None:
                supervisor.stop.remote(request_id, grace_seconds)  # seen by a status

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
        # Never submitted (a start refused, or a crash before it): nothing to ask Ray.
        holders: dict[str, list[str]] = {}
        for rid in ask:
            holder = self.records.supervisor(rid)
            if holder:
                holders.setdefault(holder, []).append(rid)
        self.supervisors.sweep()
        reports = self.supervisors.poll(holders) if holders else {}
        given_up: list[str] = []
        for rid in ask:
            if self.records.node(rid) in self._dead:  # gone, though its owner may not know yet
                given_up.append(rid)
                answers[rid] = self._gone(rid)
            else:
                answers[rid] = self._answer(rid, reports.get(rid, UNKNOWN), given_up)
        ended = [rid for rid, a in answers.items() if a.state in ENDED]
        for rid in ended:
            if self.records.dir(rid).exists():
                self.groups.release(rid)  # the last task of its group removes the group
        # Written down: the supervisors may drop them (those they never knew excepted).
        held = {
            rid for rid in ended if reports.get(rid, UNKNOWN)["state"] not in ("unknown", "slow")
        }
        self.supervisors.settle(
            forget={name: [r for r in ids if r in held] for name, ids in holders.items()},
            cancel={name: [r for r in ids if r in given_up] for name, ids in holders.items()},
        )
        return answers

    def close(self) -> None:
        self._closing = True
        self.supervisors.forget_handles()
        if self._owns_connection and ray.is_initialized():
            ray.shutdown()  # the supervisor is detached: it and its tasks keep running
        self._connected = self._owns_connection = False

    # helpers ------------------------------------------------------------------------------

    def _listen(self) -> None:
        """Once this driver's supervisor exists: a thread holds its ``changed`` call and tells
        ``on_change`` (one call at a time; an end while none is held is told by
        the next at once)."""
        if self._listening or self.on_change is None:
            return
        self._listening = True
        _, supervisor = self.supervisors.own()
        threading.Thread(
            target=self._changes, args=(supervisor,), name="aipaas-ray-changes", daemon=True
        ).start()

    def _changes(self, supervisor: Any) -> None:
        while not self._closing:
            try:
                changed = ray.get(
                    supervisor.changed.remote(CHANGES_SECONDS), timeout=CHANGES_SECONDS + 30
                )
            except Exception:  # the supervisor gone or slow: the polls still see everything
                time.sleep(1.0)
                continue
            if changed and self.on_change is not None and not self._closing:
                try:
                    self.on_change()
                except Exception:  # the server is gone: this process ends with it
                    return

    def connect(self) -> None:
        if self._connected:
            return
        # Shipped by value: the cluster's workers need not have aipaas installed.
        cloudpickle.register_pickle_by_value(runner_module)
        cloudpickle.register_pickle_by_value(supervisor_module)
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
        # The task's own directory is the same for all its attempts (``work_key``): a restart
        # finds what the last attempt wrote (on one machine, or a task root the nodes share).
        home = request.working_dir or f"{self.task_root}/{request.work_key or request.request_id}"
        cwd = home
        env = {
            "PATH": os.environ.get("PATH") or TASK_PATH,
            "LANG": os.environ.get("LANG") or "C.UTF-8",
            "HOME": home,
            "AIPAAS_WORKDIR": home,
        }
        env.update(request.env)
        env["PYTHONUNBUFFERED"] = "1"
        master = self._nodes.get(env.get("MASTER_ADDR", ""))
        if master is not None and master.address:
            env["MASTER_ADDR"] = master.address  # a node's name is not an address
            rendezvous.follow_master(env)  # an elastic job's endpoint: the same address
        # $(VAR) in the command, with the values the task gets (backends/expansion.py)
        variables = {name: env[name] for name in request.env}
        return {
            "command": list(expand_command(request.command, variables)),
            "env": env,
            "cwd": cwd,
            "log_path": request.log_path,
        }

    def _answer(self, rid: str, report: dict[str, Any], given_up: list[str]) -> TaskStatus:
        state = report.get("state")
        if state == "slow":  # nothing known: nothing concluded
            return TaskStatus(rid, TaskState.UNREACHABLE, message="the Ray supervisor is slow")
        if state == "pending":
            return self._unstarted(rid, given_up)
        if state == "unknown":
            return self._gone(rid)
        if not self.records.has(rid, "answered"):
            self.records.mark(rid, "answered")  # it ran: no start deadline any more
        if state == "running":
            return TaskStatus(rid, TaskState.RUNNING)
        if state == "exit":
            self.records.mark(rid, "exit", f"{int(report['code'])}\n")
            recorded = self.records.recorded(rid)
            assert recorded is not None
            return recorded
        # an error: cancelled, its worker or node died, or Ray refused it before it started
        if not report.get("started") and not self.records.has(rid, "stop"):
            self.records.mark(rid, "lost", f"Ray did not start the task: {report.get('message')}")
        return self._gone(rid)

    def _unstarted(self, rid: str, given_up: list[str]) -> TaskStatus:
        """Not started yet (the controller keeps it Starting, and its start asked again is a
        no-op), unless Ray has not started it within ``start_seconds`` of its start."""
        if self.records.since_created(rid) < self.start_seconds:
            return TaskStatus(rid, TaskState.UNKNOWN, message="waiting for Ray to start the task")
        unplaced = self.groups.state(rid) == "PENDING"
        given_up.append(rid)
        what = (
            "Ray could not place the task's placement group"
            if unplaced
            else "Ray did not start the task"
        )
        self.records.mark(
            rid,
            "lost",
            f"{what} within {self.start_seconds:g} s (its node lacks the resources Ray accounts)",
        )
        return self._gone(rid)

    def _gone(self, rid: str) -> TaskStatus:
        """No running task and no recorded exit code; a lost task's node is checked."""
        answer = self.records.gone(rid)
        node = self.records.node(rid)
        if answer.message == GONE and node is not None:
            self._suspect[node] = time.monotonic()
        return answer

    def _failing(self, nodes: Sequence[RayNode]) -> list[str]:
        """Nodes Ray still lists as alive where a task was lost lately and whose raylet does
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


def _answers(node: RayNode, timeout: float = 0.2) -> bool:
    """The node's raylet accepts a connection (a killed one refuses at once)."""
    if not node.address or not node.raylet_port:
        return True  # nothing to check: Ray's own health checks decide
    try:
        with socket.create_connection((node.address, node.raylet_port), timeout=timeout):
            return True
    except OSError:
        return False
