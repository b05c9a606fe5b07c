"""NVML errors are said, not swallowed, and GPUs are read again: a fake NVML whose GPUs come,
go and fail."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from aipaas.backends.local import LocalBackend
from aipaas.backends.local.backend import GPU_ANNOTATION
from aipaas.backends.local.nvml import discover


class Nvml:
    """A configurable NVML: ``count`` H100s; ``init_error`` fails the start; ``broken`` GPUs
    fail when read."""

    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_DRIVER_NOT_LOADED = 9

    class NVMLError(Exception):
        def __init__(self, value: int, text: str) -> None:
            super().__init__(text)
            self.value = value

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.init_error: tuple[int, str] | None = None
        self.broken: set[int] = set()
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1
        if self.init_error is not None:
            raise self.NVMLError(*self.init_error)

    def nvmlShutdown(self) -> None: ...

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index in self.broken:
            raise self.NVMLError(15, "GPU is lost")
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=80 * 2**30)

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        return (0, 0)

    def __getattr__(self, name: str) -> Any:
        def missing(*_args: object) -> object:
            raise self.NVMLError(3, f"{name}: Not Supported")

        return missing


def names(found: Any) -> list[str]:
    return [device.name for device in found.slice.spec.devices]


class TestDiscover:
    def test_no_library_on_a_machine_without_gpus_is_quiet(self, tmp_path: Path) -> None:
        nvml = Nvml()
        nvml.init_error = (12, "NVML Shared Library Not Found")
        found = discover("box", nvml, devices_dir=tmp_path)
        assert found.quiet and names(found) == []
        assert found.problem == "NVML could not start: NVML Shared Library Not Found"

    def test_no_library_beside_a_gpu_device_node_is_a_problem(self, tmp_path: Path) -> None:
        (tmp_path / "nvidia0").touch()  # the kernel driver made a GPU device: NVML should work
        nvml = Nvml()
        nvml.init_error = (12, "NVML Shared Library Not Found")
        found = discover("box", nvml, devices_dir=tmp_path)
        assert not found.quiet and found.problem is not None

    def test_another_start_error_is_a_problem(self, tmp_path: Path) -> None:
        nvml = Nvml()
        nvml.init_error = (999, "Unknown Error")
        found = discover("box", nvml, devices_dir=tmp_path)
        assert (found.quiet, found.problem) == (False, "NVML could not start: Unknown Error")

    def test_a_failing_gpu_is_named_kept_at_its_index_and_tainted(self, tmp_path: Path) -> None:
        nvml = Nvml(count=3)
        nvml.broken = {1}
        found = discover("box", nvml, devices_dir=tmp_path)
        # gpu-1 stays gpu-1 (gpu-2 keeps index 2), but takes nothing new
        assert names(found) == ["gpu-0", "gpu-1", "gpu-2"]
        assert found.problem == "NVML failed: GPU 1: GPU is lost"
        taints = [[(t.key, t.value, t.effect) for t in d.taints] for d in found.slice.spec.devices]
        assert taints == [[], [("gpu.nvidia.com/unhealthy", "NVML-GPU-is-lost", "NoSchedule")], []]

    def test_all_well(self, tmp_path: Path) -> None:
        found = discover("box", Nvml(), devices_dir=tmp_path)
        assert (names(found), found.problem, found.quiet) == (["gpu-0", "gpu-1"], None, False)


def backend(tmp_path: Path, nvml: Nvml, seconds: float) -> LocalBackend:
    return LocalBackend(
        tmp_path / "run",
        node_name="box",
        cpu_milli=1000,
        memory_mib=1024,
        nvml=nvml,
        gpu_discovery_seconds=seconds,
    )


class TestBackend:
    def test_gpus_that_come_and_go_are_seen(self, tmp_path: Path) -> None:
        nvml = Nvml(count=1)
        local = backend(tmp_path, nvml, seconds=1e-9)
        assert local.inventory().nodes[0].gpu_count == 1
        nvml.count = 2
        assert local.inventory().nodes[0].gpu_count == 2
        assert [d.name for d in local.inventory().slices[0].spec.devices] == ["gpu-0", "gpu-1"]
        nvml.count = 0
        inventory = local.inventory()
        assert inventory.nodes[0].gpu_count == 0 and inventory.slices == ()
        assert "gpu" not in inventory.features

    def test_readings_are_cached(self, tmp_path: Path) -> None:
        nvml = Nvml(count=1)
        local = backend(tmp_path, nvml, seconds=3600)
        for _ in range(5):
            local.inventory()
        nvml.count = 2
        assert local.inventory().nodes[0].gpu_count == 1
        assert nvml.inits == 1

    def test_an_nvml_error_is_logged_once_and_annotated(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        nvml = Nvml(count=2)
        nvml.init_error = (999, "Unknown Error")
        with caplog.at_level(logging.INFO, logger="aipaas.backends.local.backend"):
            local = backend(tmp_path, nvml, seconds=1e-9)
            for _ in range(3):
                node = local.inventory().nodes[0]
        warnings = [r for r in caplog.records if "NVML" in r.getMessage()]
        assert [r.levelno for r in warnings] == [logging.WARNING]
        assert "Unknown Error" in warnings[0].getMessage()
        assert node.gpu_count == 0
        assert node.annotations[GPU_ANNOTATION] == (
            "NVML could not start: Unknown Error; this node offers 0 GPU(s) through NVML"
        )
        nvml.init_error = None  # the driver is back
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="aipaas.backends.local.backend"):
            node = local.inventory().nodes[0]
        assert node.gpu_count == 2
        assert node.annotations[GPU_ANNOTATION] == "2 GPU(s) read through NVML"
        said = [(r.levelno, r.getMessage()) for r in caplog.records]
        assert said == [(logging.INFO, "local backend: 2 GPU(s) read through NVML")]

    def test_given_gpus_are_not_read_again(self, tmp_path: Path) -> None:
        nvml = Nvml(count=1)
        local = LocalBackend(tmp_path / "run", node_name="box", gpus=[], nvml=nvml)
        nvml.count = 4
        assert local.inventory().nodes[0].gpu_count == 0 and nvml.inits == 0
