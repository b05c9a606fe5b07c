"""This machine: each task a real process; GPUs from NVML when there are any."""

from aipaas.backends.local.backend import LocalBackend, LocalOptions
from aipaas.backends.local.isolation import TaskIsolation

__all__ = ["LocalBackend", "LocalOptions", "TaskIsolation"]
