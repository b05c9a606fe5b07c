"""Build the backend a server asks for: ``local``, ``sim`` or ``demo`` (sim + this machine)."""

from __future__ import annotations

from pathlib import Path

from aipaas.backends.base import Backend
from aipaas.backends.composite import CompositeBackend
from aipaas.backends.local import LocalBackend
from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import Clock

NAMES = ("local", "sim", "demo")


def make_backend(
    name: str,
    run_dir: Path,
    *,
    sim_cluster: Path | None = None,
    local_cpu_milli: int | None = None,
    clock: Clock | None = None,
) -> Backend:
    if name == "local":
        return LocalBackend(run_dir, cpu_milli=local_cpu_milli)
    if name == "sim":
        return SimBackend(run_dir, load_cluster(sim_cluster), clock)
    if name == "demo":
        return CompositeBackend(
            [
                LocalBackend(run_dir, cpu_milli=local_cpu_milli),
                SimBackend(run_dir, load_cluster(sim_cluster), clock),
            ]
        )
    raise ValueError(f"unknown backend {name!r}; known: {', '.join(NAMES)}")
