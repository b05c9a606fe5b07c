"""A server wraps its backends in the fencing wrapper (backends/fencing.py); the optional
capabilities found by looking at the backend (GPU utilisation for idle-GPU alerts, the pool
methods for node pools) must be found through it, as a server really builds its backends."""

from __future__ import annotations

from pathlib import Path

from aipaas.autoscale.pool_provider import pool_provider
from aipaas.backends.base import Backend
from aipaas.backends.composite import CompositeBackend
from aipaas.backends.fencing import Fenced, TokenFile
from aipaas.backends.gpu_utilization import gpu_utilization_of
from aipaas.backends.local import LocalBackend
from aipaas.backends.registry import make_backend
from aipaas.backends.sim import SimBackend


class _PoolsOnly:
    """A backend named slurm with the pool methods (what SlurmBackend offers)."""

    name = "slurm"

    def list_nodes(self, pool: str) -> list[object]:
        return []

    def create_nodes(self, pool: str, count: int) -> list[str]:
        return []

    def drain_nodes(self, names: list[str]) -> None:
        return None

    def undrain_nodes(self, names: list[str]) -> None:
        return None

    def delete_nodes(self, names: list[str]) -> None:
        return None


def test_the_local_backend_a_server_builds_reports_gpu_utilisation(tmp_path: Path) -> None:
    backend = make_backend("local", tmp_path / "run")
    try:
        assert isinstance(backend, Fenced)  # as a server builds it
        assert isinstance(gpu_utilization_of(backend), LocalBackend)
    finally:
        backend.close()


def test_a_composite_asks_its_fenced_members(tmp_path: Path) -> None:
    backend = make_backend("demo", tmp_path / "run")
    try:
        assert isinstance(backend, CompositeBackend)
        members = [gpu_utilization_of(m) for m in backend.backends]
        assert any(isinstance(m, LocalBackend) for m in members)
    finally:
        backend.close()


def test_a_backend_without_the_capability_has_none(tmp_path: Path) -> None:
    assert gpu_utilization_of(SimBackend(tmp_path / "run", [])) is None


def test_pools_are_found_through_the_fencing_wrapper(tmp_path: Path) -> None:
    inner: object = _PoolsOnly()
    fenced = Fenced(inner, TokenFile(tmp_path / "token"))  # type: ignore[arg-type]
    assert pool_provider(fenced, "slurm") is inner
    assert pool_provider(fenced, "ray") is None
    sim: Backend = SimBackend(tmp_path / "sim", [])
    assert pool_provider(CompositeBackend([sim, fenced]), "slurm") is inner
