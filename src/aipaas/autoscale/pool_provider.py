"""What grows and shrinks a node pool: a provider (the sim backend's nodes, Slurm's powered-down
nodes, a cloud provider's instances) behind one small interface.

A backend offers pools by having these methods (checked with ``pool_provider``, never by the
backend's name); a cloud provider's API is added by writing one more class with them. The
provider keeps the pool's nodes across restarts (its own records, or the cloud's), so the
controller can ask it what exists (``list_nodes``) rather than remember.

The contract the controller relies on:
- ``create_nodes`` returns at once; the nodes are PROVISIONING until ready, then the backend's
  inventory reports them and work may be placed there.
- ``drain_nodes`` (cordon): the nodes stay, their tasks run on, nothing new is placed there (the
  backend reports them as not ready to take work). ``undrain_nodes`` takes that back.
- ``delete_nodes`` is asked only for drained nodes with nothing running; a provider refuses
  (skips) a node that still runs a task: a scale-down never kills a task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, cast


class NodeState(StrEnum):
    PROVISIONING = "Provisioning"
    READY = "Ready"
    DRAINING = "Draining"


@dataclass(frozen=True)
class PoolNode:
    name: str
    state: NodeState
    #: when the node entered its state (seconds since the epoch, the clock's time)
    since: float


@dataclass(frozen=True)
class NodeTemplate:
    """What each new node of a pool is."""

    pool: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_model: str = ""
    gpu_memory_mib: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    provisioning_seconds: float = 0.0


class PoolProvider(Protocol):
    """A backend's optional capability: nodes that come and go."""

    def list_nodes(self, pool: str) -> list[PoolNode]:
        """The pool's nodes now, in every state."""
        ...

    def create_nodes(self, template: NodeTemplate, count: int) -> list[str]:
        """Start ``count`` new nodes of the template; their names."""
        ...

    def drain_nodes(self, pool: str, names: Sequence[str]) -> None:
        """Cordon: nothing new lands on these nodes; their tasks go on."""
        ...

    def undrain_nodes(self, pool: str, names: Sequence[str]) -> None:
        """Take a drain back: the nodes take work again."""
        ...

    def delete_nodes(self, pool: str, names: Sequence[str]) -> list[str]:
        """Remove drained, empty nodes; the names really removed (a busy one is skipped)."""
        ...


_METHODS = ("list_nodes", "create_nodes", "drain_nodes", "undrain_nodes", "delete_nodes")


def pool_provider(backend: object, name: str) -> PoolProvider | None:
    """The provider for pools on backend ``name``: ``backend`` itself, or the member of that
    name of a composite backend, when it has the pool methods; a server's fencing wrapper
    (backends/fencing.py) is looked through."""
    candidates = [
        layer
        for member in (backend, *getattr(backend, "backends", ()))
        for layer in _layers(member)
    ]
    for candidate in candidates:
        if getattr(candidate, "name", None) != name:
            continue
        if all(callable(getattr(candidate, method, None)) for method in _METHODS):
            return cast(PoolProvider, candidate)
    return None


def _layers(backend: object) -> list[object]:
    """The backend and those it wraps, outermost first."""
    layers = []
    while backend is not None:
        layers.append(backend)
        backend = getattr(backend, "inner", None)
    return layers
