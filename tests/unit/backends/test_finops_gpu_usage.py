"""The local backend tells how busy its GPUs are (NVML, a fake module here: no GPU on the test
machine); a GPU NVML cannot read and a machine without NVML tell nothing, never "idle"."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from aipaas.backends.composite import CompositeBackend
from aipaas.backends.gpu_utilization import GpuUtilization
from aipaas.backends.local.backend import LocalBackend
from aipaas.backends.local.gpu_usage import read_utilization


class Nvml:
    """Four GPUs: busy, idle, one NVML cannot read (MIG), busy."""

    class NVMLError(Exception):
        pass

    def __init__(self, *, starts: bool = True) -> None:
        self.starts = starts
        self.shut = False

    def nvmlInit(self) -> None:
        if not self.starts:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return 4

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        if handle == 2:
            raise self.NVMLError("Not Supported")
        return SimpleNamespace(gpu=[97, 0, 0, 55][handle], memory=10)


def test_each_readable_gpu_is_reported_by_its_index() -> None:
    nvml = Nvml()
    assert read_utilization("box", nvml) == {("box", 0): 97.0, ("box", 1): 0.0, ("box", 3): 55.0}
    assert nvml.shut


def test_no_nvml_tells_nothing() -> None:
    assert read_utilization("box", Nvml(starts=False)) == {}


def test_the_local_backend_and_a_composite_have_the_capability(tmp_path: Path) -> None:
    local = LocalBackend(tmp_path / "run", nvml=Nvml(starts=False), node_name="box")
    assert isinstance(local, GpuUtilization)
    assert local.gpu_utilization() == {}  # a machine without NVML: nothing to tell
    both = CompositeBackend([local])
    assert isinstance(both, GpuUtilization)
    assert both.gpu_utilization() == {}
    local.close()
