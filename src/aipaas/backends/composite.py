"""Several backends as one: each node belongs to one backend, requests go where their node is.

A member that fails to answer does not make its nodes vanish: its last reported nodes stay in
the inventory marked unknown (``Inventory.unknown``), and ``status`` answers ``UNREACHABLE``
for the tasks no member that answered knows. Members given as ``on_request`` (the simulated
cluster of the demo backend) label their nodes so that the controller places there only the
jobs that ask for them, and a task that did not ask is never started on one.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

from aipaas.api.devices import ResourceSlice
from aipaas.backends.base import (
    Backend,
    Inventory,
    LaunchRequest,
    NodeInfo,
    TaskState,
    TaskStatus,
    membership_files,
)
from aipaas.backends.gang import places_gangs
from aipaas.backends.gpu_utilization import gpu_utilization_of
from aipaas.backends.probe_exec import NOT_HERE, probe_exec_of
from aipaas.backends.service_endpoints import endpoint_owners
from aipaas.backends.task_exec import ExecResult, TaskSession, task_exec_of, task_sessions_of

log = logging.getLogger("aipaas.backends")

#: a node with this label takes only tasks that ask for it (``LaunchRequest.simulated``)
ON_REQUEST_LABEL = "aipaas.dev/on-request"


class CompositeBackend:
    name = "composite"

    def __init__(self, backends: Sequence[Backend], on_request: Sequence[Backend] = ()) -> None:
        if not backends:
            raise ValueError("a composite backend needs at least one backend")
        self.backends = tuple(backends)
        self._on_request = {id(b) for b in on_request}
        self._by_node: dict[str, Backend] = {}
        self._last: dict[int, Inventory] = {}  # per member: its last inventory that answered
        #: a member reserves gangs at once (Ray): starts carry their gang (backends/gang.py)
        self.places_gangs = any(places_gangs(b) for b in self.backends)

    def inventory(self) -> Inventory:
        nodes: list[NodeInfo] = []
        features: set[str] = set()
        slices: list[ResourceSlice] = []
        unknown: set[str] = set()
        complete = True
        for backend in self.backends:
            try:
                inventory = self._labelled(backend, backend.inventory())
            except Exception as err:  # a member that cannot answer: its nodes are unknown
                log.warning("inventory of backend %s failed: %s", backend.name, err)
                last = self._last.get(id(backend))
                if last is None:
                    complete = False  # never answered: its nodes are not even known
                    continue
                inventory = last
                unknown.update(n.name for n in last.nodes)
            else:
                self._last[id(backend)] = inventory
                unknown.update(inventory.unknown)
                complete = complete and inventory.complete
            for node in inventory.nodes:
                if node.name in self._by_node and self._by_node[node.name] is not backend:
                    raise ValueError(f"node {node.name} is reported by two backends")
                self._by_node[node.name] = backend
            nodes.extend(inventory.nodes)
            features |= inventory.features
            slices.extend(inventory.slices)
        return Inventory(
            tuple(nodes),
            frozenset(features),
            tuple(slices),
            unknown=frozenset(unknown),
            complete=complete,
        )

    def _labelled(self, backend: Backend, inventory: Inventory) -> Inventory:
        if id(backend) not in self._on_request:
            return inventory
        nodes = tuple(
            dataclasses.replace(n, labels={**n.labels, ON_REQUEST_LABEL: "true"})
            for n in inventory.nodes
        )
        return dataclasses.replace(inventory, nodes=nodes)

    def start(self, request: LaunchRequest) -> None:
        if request.node not in self._by_node:
            self.inventory()
        backend = self._by_node.get(request.node)
        if backend is None:
            raise ValueError(f"no backend has node {request.node}")
        if id(backend) in self._on_request and not request.simulated:
            # Never run a real command on a simulated node (it would "succeed" unrun).
            raise ValueError(
                f"node {request.node} takes only jobs that ask for it "
                "(the sim.aipaas.dev/duration annotation)"
            )
        backend.start(request)

    def endpoint_owner(self, request_id: str, port: int) -> bool | None:
        """The first member that can tell (a task runs on one member only)."""
        for backend in self.backends:
            member = endpoint_owners(backend)
            answer = member.endpoint_owner(request_id, port) if member is not None else None
            if answer is not None:
                return answer
        return None

    def exec_task(
        self, request_id: str, command: Sequence[str], timeout: float
    ) -> ExecResult | None:
        """The answer of the member that runs the task (the others say None)."""
        for backend in self.backends:
            member = task_exec_of(backend)
            answer = member.exec_task(request_id, command, timeout) if member else None
            if answer is not None:
                return answer
        return None

    def open_session(
        self, request_id: str, command: Sequence[str], *, tty: bool, rows: int, cols: int
    ) -> TaskSession | None:
        """The session of the member that runs the task (the others say None)."""
        for backend in self.backends:
            member = task_sessions_of(backend)
            if member is None:
                continue
            session = member.open_session(request_id, command, tty=tty, rows=rows, cols=cols)
            if session is not None:
                return session
        return None

    def probe_exec(self, request_id: str, command: Sequence[str], timeout: float) -> str | None:
        """The answer of the member that runs the task (the others say NOT_HERE)."""
        for backend in self.backends:
            member = probe_exec_of(backend)
            answer = member.probe_exec(request_id, command, timeout) if member else NOT_HERE
            if answer != NOT_HERE:
                return answer
        return "no backend here can run exec probes for this replica"

    def gpu_utilization(self) -> dict[tuple[str, int], float]:
        """What every member that can tell says (nodes are the members' own)."""
        found: dict[tuple[str, int], float] = {}
        for backend in self.backends:
            member = gpu_utilization_of(backend)
            if member is not None:
                found.update(member.gpu_utilization())
        return found

    def membership_file(self, node: str, tenant: str, job: str) -> str | None:
        member = membership_files(self._by_node.get(node))
        return member.membership_file(node, tenant, job) if member is not None else None

    def update_membership(self, tenant: str, job: str, payload: Mapping[str, object]) -> None:
        """Every member that keeps membership files writes it (a job may span members)."""
        for backend in self.backends:
            member = membership_files(backend)
            if member is not None:
                member.update_membership(tenant, job, payload)

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        failed: Exception | None = None
        for backend in self.backends:
            try:
                backend.stop(request_id, grace_seconds)
            except Exception as err:  # the others are still asked; the caller hears of it
                failed = err
        if failed is not None:
            raise failed

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        merged = {rid: TaskStatus(rid, TaskState.UNKNOWN) for rid in request_ids}
        unreachable = False
        for backend in self.backends:
            try:
                answers = backend.status(request_ids)
            except Exception as err:  # who knows the task may be this one: not "unknown"
                log.warning("status from backend %s failed: %s", backend.name, err)
                unreachable = True
                continue
            for rid, status in answers.items():
                # an UNKNOWN with a message (a task Slurm still holds, and why) says more than
                # the silence of the members that never had the task
                if status.state is not TaskState.UNKNOWN or (
                    status.message and merged[rid].state is TaskState.UNKNOWN
                ):
                    merged[rid] = status
        if unreachable:
            for rid, status in merged.items():
                if status.state is TaskState.UNKNOWN:
                    merged[rid] = TaskStatus(rid, TaskState.UNREACHABLE, message="unreachable")
        return merged

    def close(self) -> None:
        for backend in self.backends:
            backend.close()
