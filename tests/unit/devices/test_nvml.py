"""The local backend's ResourceSlice from NVML: a fake NVML, no NVML, and the real one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from aipaas.api.devices import dump_device_object
from aipaas.backends.local.nvml import pcie_root, publish_slice
from aipaas.devices.inventory import Inventory


class FakeNvml:
    """Two GPUs: an H100 and an A100 with MIG enabled holding one 3g.40gb instance."""

    class NVMLError(Exception):
        pass

    def __init__(self, *, init_fails: bool = False) -> None:
        self.init_fails = init_fails
        self.shut = False

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetName(self, handle: str) -> str:
        return {
            "gpu0": "NVIDIA H100 80GB HBM3",
            "gpu1": "NVIDIA A100-SXM4-80GB",
            "mig1-0": "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
        }[handle]

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        return f"GPU-{handle}"

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Any:
        return SimpleNamespace(total=40 * 2**30 if handle.startswith("mig") else 80 * 2**30)

    def nvmlDeviceGetCudaComputeCapability(self, handle: str) -> tuple[int, int]:
        return (9, 0) if handle == "gpu0" else (8, 0)

    def nvmlDeviceGetArchitecture(self, handle: str) -> int:
        return 9 if handle == "gpu0" else 7

    def nvmlDeviceGetMigMode(self, handle: str) -> tuple[int, int]:
        return (1, 1) if handle == "gpu1" else (0, 0)

    def nvmlDeviceGetPciInfo(self, handle: str) -> Any:
        return SimpleNamespace(
            busId=b"00000000:18:00.0" if handle == "gpu0" else b"00000000:9A:00.0"
        )

    def nvmlDeviceGetNumaNodeId(self, handle: str) -> int:
        return 0 if handle == "gpu0" else 1

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: str) -> int:
        return 2

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: str, index: int) -> str:
        if index == 1:
            raise self.NVMLError("Not Found")
        return "mig1-0"


class TestPublishSlice:
    def test_fake_gpus(self) -> None:
        fake = FakeNvml()
        published = publish_slice("box", fake)
        assert fake.shut
        wire = dump_device_object(published)
        assert wire["spec"]["nodeName"] == "box"
        devices = wire["spec"]["devices"]
        # gpu-1 has MIG enabled: only its MIG device is offered, never the GPU whole.
        assert [d["name"] for d in devices] == ["gpu-0", "gpu-1-mig-0"]
        attributes = devices[0]["attributes"]
        assert attributes["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
        assert attributes["model"] == {"string": "H100"}
        assert attributes["uuid"] == {"string": "GPU-gpu0"}
        assert attributes["architecture"] == {"string": "Hopper"}
        assert attributes["cudaComputeCapability"] == {"version": "9.0.0"}
        assert attributes["driverVersion"] == {"version": "550.54.15"}
        assert attributes["migEnabled"] == {"bool": False}
        assert attributes["pciBusID"] == {"string": "00000000:18:00.0"}
        assert attributes["numaNode"] == {"int": 0}
        assert devices[0]["capacity"] == {"memory": {"value": str(80 * 2**30)}}
        mig = devices[1]["attributes"]
        assert mig["type"] == {"string": "mig"}
        assert mig["profile"] == {"string": "3g.40gb"}
        assert mig["parentUUID"] == {"string": "GPU-gpu1"}
        # The slice is usable as inventory.
        assert len(Inventory([published]).by_node["box"]) == 2

    def test_no_library_gives_an_empty_slice(self) -> None:
        published = publish_slice("box", FakeNvml(init_fails=True))
        assert published.spec.devices == []
        assert published.spec.node_name == "box"

    def test_pcie_root_from_sysfs(self, tmp_path: Path) -> None:
        target = tmp_path / "devices" / "pci0000:17" / "0000:17:01.0" / "0000:18:00.0"
        target.mkdir(parents=True)
        links = tmp_path / "bus"
        links.mkdir()
        (links / "0000:18:00.0").symlink_to(target)
        assert pcie_root("00000000:18:00.0", links) == "pci0000:17"
        assert pcie_root("00000000:19:00.0", links) is None


@pytest.mark.gpu
def test_real_gpu_slice() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        pytest.skip(f"no NVIDIA GPU here: NVML could not start ({err}); the real-GPU check skips")
    try:
        count = pynvml.nvmlDeviceGetCount()
        uuids = [
            pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)
        ]
    finally:
        pynvml.nvmlShutdown()
    if count == 0:
        pytest.skip("NVML started but reports no GPU; the real-GPU check skips")
    published = publish_slice("this-node")
    gpus = [d for d in published.spec.devices if d.attributes["type"].string == "gpu"]
    assert [d.attributes["uuid"].string for d in gpus] == [
        u.decode() if isinstance(u, bytes) else u for u in uuids
    ]
    for device in gpus:
        assert int(device.capacity["memory"].value) > 0
        assert device.attributes["productName"].string
        assert device.attributes["cudaComputeCapability"].version
