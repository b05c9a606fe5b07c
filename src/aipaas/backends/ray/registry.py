"""Build the Ray backend for ``make_backend`` (``--backend ray --ray-address ADDR``).

``ray`` is an optional dependency (``pip install 'aipaas[ray]'``); it is imported only in the
driver process (backend.py), never in the server's.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from aipaas.backends.base import Backend
from aipaas.backends.fencing import FENCING_FILE, Fenced, TokenFile
from aipaas.backends.ray.backend import RayBackend


class FencedRay(Fenced):
    #: Ray reserves a gang as one placement group: starts carry their gang (backends/gang.py)
    places_gangs = True
    #: a task is never running when its start returns (Ray starts it later): the controller
    #: does not ask right away (controller/cycle.py)
    starts_later = True

    def watch(self, on_change: Callable[[], None]) -> None:
        """``on_change`` is called when a task ended (controller/loop.py wakes)."""
        if isinstance(self.inner, RayBackend):
            self.inner.watch(on_change)

    @property
    def waited_seconds(self) -> float:
        """Seconds the controller has spent blocked on the driver (controller/loop.py)."""
        inner = self.inner
        return inner.waited_seconds if isinstance(inner, RayBackend) else 0.0


def ray_backend(run_dir: Path, address: str | None) -> Backend:
    """The Ray backend, refusing starts from a controller whose lease was taken over; its
    records sit in ``run_dir/ray``."""
    if importlib.util.find_spec("ray") is None:  # the extra is not installed
        raise ValueError("the ray backend needs the ray package (pip install 'aipaas[ray]')")
    backend = RayBackend(run_dir / "ray", address)
    return FencedRay(backend, TokenFile(backend.run_dir / FENCING_FILE))
