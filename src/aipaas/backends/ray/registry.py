"""Build the Ray backend for ``make_backend`` (``--backend ray --ray-address ADDR``).

``ray`` is imported only here, when the backend is asked for: it is an optional dependency
(``pip install 'aipaas[ray]'``) and its import costs about a second.
"""

from __future__ import annotations

from pathlib import Path

from aipaas.backends.base import Backend
from aipaas.backends.fencing import FENCING_FILE, Fenced, TokenFile


def ray_backend(run_dir: Path, address: str | None) -> Backend:
    """The Ray backend, refusing starts from a controller whose lease was taken over; its
    records sit in ``run_dir/ray``."""
    try:
        from aipaas.backends.ray.backend import RayBackend
    except ImportError as err:  # the extra is not installed
        raise ValueError(
            f"the ray backend needs the ray package (pip install 'aipaas[ray]'): {err}"
        ) from err
    backend = RayBackend(run_dir / "ray", address)
    return Fenced(backend, TokenFile(backend.run_dir / FENCING_FILE))
