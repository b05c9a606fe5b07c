"""The simulator: virtual nodes where a task lasts a declared time. It says so: no real work."""

from aipaas.backends.sim.backend import SimBackend
from aipaas.backends.sim.cluster import load_cluster

__all__ = ["SimBackend", "load_cluster"]
