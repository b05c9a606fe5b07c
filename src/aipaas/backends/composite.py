"""Several backends as one: each node belongs to one backend, requests go where their node is."""

from __future__ import annotations

from collections.abc import Sequence

from aipaas.api.devices import ResourceSlice
from aipaas.backends.base import Backend, Inventory, LaunchRequest, NodeInfo, TaskState, TaskStatus


class CompositeBackend:
    name = "composite"

    def __init__(self, backends: Sequence[Backend]) -> None:
        if not backends:
            raise ValueError("a composite backend needs at least one backend")
        self.backends = tuple(backends)
        self._by_node: dict[str, Backend] = {}

    def inventory(self) -> Inventory:
        nodes: list[NodeInfo] = []
        features: set[str] = set()
        slices: list[ResourceSlice] = []
        for backend in self.backends:
            inventory = backend.inventory()
            for node in inventory.nodes:
                if node.name in self._by_node and self._by_node[node.name] is not backend:
                    raise ValueError(f"node {node.name} is reported by two backends")
                self._by_node[node.name] = backend
            nodes.extend(inventory.nodes)
            features |= inventory.features
            slices.extend(inventory.slices)
        return Inventory(tuple(nodes), frozenset(features), tuple(slices))

    def start(self, request: LaunchRequest) -> None:
        if request.node not in self._by_node:
            self.inventory()
        backend = self._by_node.get(request.node)
        if backend is None:
            raise ValueError(f"no backend has node {request.node}")
        backend.start(request)

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        for backend in self.backends:
            backend.stop(request_id, grace_seconds)

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        merged = {rid: TaskStatus(rid, TaskState.UNKNOWN) for rid in request_ids}
        for backend in self.backends:
            for rid, status in backend.status(request_ids).items():
                if status.state is not TaskState.UNKNOWN:
                    merged[rid] = status
        return merged

    def close(self) -> None:
        for backend in self.backends:
            backend.close()
