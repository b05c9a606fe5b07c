"""An optional capability: run a service replica's ``exec`` probe beside it (issue 28).

A Kubernetes exec probe runs a command in the replica's container; here the backend that runs
the replica runs the command as the replica's user, with its environment and working
directory, and says whether it exited 0 within the timeout. The controller's prober
(controller/services_probe.py) asks for it; a backend without it fails the probe with why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast

#: a backend's answer for a task it does not run (a composite asks its next member)
NOT_HERE = "the replica does not run on this backend"


class ProbeExec(Protocol):
    def probe_exec(self, request_id: str, command: Sequence[str], timeout: float) -> str | None:
        """None: the command exited 0 within ``timeout`` seconds; else why it failed."""
        ...


def probe_exec_of(backend: object) -> ProbeExec | None:
    """The backend, when it can run exec probes."""
    if hasattr(backend, "probe_exec"):
        return cast(ProbeExec, backend)
    return None
