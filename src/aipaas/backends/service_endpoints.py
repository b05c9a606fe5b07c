"""An optional capability: whether the process listening on a service replica's port is the
replica's own (issue 14).

Where tasks of several tenants share a host (the local backend), any task may bind any free
port: a task that took another tenant's replica port first would pass that replica's health
checks and receive its requests. Before a replica is first listed as ready, the controller
asks the backend (when it has this capability) who holds the port; a port held by another
process makes the replica be replaced, on another port.
"""

from __future__ import annotations

from typing import Protocol, cast


class EndpointOwners(Protocol):
    def endpoint_owner(self, request_id: str, port: int) -> bool | None:
        """True: a process of the task ``request_id`` listens on ``port``; False: another
        process does; None: nothing listens there (yet), or this backend cannot tell."""
        ...


def endpoint_owners(backend: object) -> EndpointOwners | None:
    """The backend, when it can tell who listens on a port."""
    if hasattr(backend, "endpoint_owner"):
        return cast(EndpointOwners, backend)
    return None
