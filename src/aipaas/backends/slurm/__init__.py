"""The Slurm backend: tasks run as Slurm batch jobs on a real cluster (backend.py)."""

from aipaas.backends.slurm.backend import MODES, Mode, SlurmBackend
from aipaas.backends.slurm.commands import SlurmError

__all__ = ["MODES", "Mode", "SlurmBackend", "SlurmError"]
