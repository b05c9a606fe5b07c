"""This machine: each task a real process; GPUs from NVML when there are any."""

from aipaas.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
