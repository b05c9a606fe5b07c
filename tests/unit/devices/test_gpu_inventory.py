"""Each GPU's memory, health and UUID as every backend's inventory reports them, in the same
node annotations (``aipaas.dev/gpu-uuids``, ``aipaas.dev/unhealthy-gpus``) and, for health,
the same device taint in the node's slice; the controller's placement reads them into the
scheduler's node (an unhealthy GPU takes nothing new; a share may name GPUs by UUID).

No upstream table is translated here (HAMi reads health from its device plugin, Kubernetes
from DRA device taints, which the last cases follow). Answers worked by hand from each
backend's input: NVML readings (local), ``sinfo --json``
entries with node features (Slurm), ``ray.nodes()`` entries with labels (Ray), and DRA
ResourceSlices with device taints (Kubernetes, as the structured allocator reads taints:
NoSchedule and NoExecute keep new allocations off, None only informs).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from aipaas.api.devices import ResourceSlice
from aipaas.backends.base import NodeInfo
from aipaas.backends.kubernetes.inventory import inventory as kube_inventory
from aipaas.backends.local import LocalBackend
from aipaas.backends.ray.inventory import nodes_of, slices_of
from aipaas.backends.slurm.inventory import read_nodes
from aipaas.controller.placement import Placer
from aipaas.devices.gpu_health import (
    GPU_UUIDS_ANNOTATION,
    UNHEALTHY_GPUS_ANNOTATION,
    UNHEALTHY_TAINT_KEY,
    GpuFacts,
    gpu_annotations,
    parse_index_list,
    slice_gpus,
    taint_unhealthy,
    taint_value,
)
from aipaas.devices.topology_files import DRIVER, GpuShape, gpu_node_slices


def tainted(published: list[ResourceSlice]) -> dict[str, list[str]]:
    return {
        d.name: [f"{t.key}:{t.effect}" for t in d.taints]
        for s in published
        for d in s.spec.devices
        if d.taints
    }


class TestGpuHealth:
    @pytest.mark.parametrize(
        ("gpus", "want"),
        [
            pytest.param(
                [GpuFacts(1, "GPU-b"), GpuFacts(0, "GPU-a", healthy=False)],
                {GPU_UUIDS_ANNOTATION: "GPU-a,GPU-b", UNHEALTHY_GPUS_ANNOTATION: "0"},
                id="uuids by index, and the unhealthy index",
            ),
            pytest.param(
                [GpuFacts(0, "GPU-a"), GpuFacts(1, "")],
                {},
                id="one uuid unknown: no uuids (they would not line up with indices)",
            ),
            pytest.param([], {}, id="no GPU: nothing"),
        ],
    )
    def test_annotations(self, gpus: list[GpuFacts], want: dict[str, str]) -> None:
        assert gpu_annotations(gpus) == want

    @pytest.mark.parametrize(
        ("text", "want"),
        [
            pytest.param("0,3", (0, 3), id="commas"),
            pytest.param("3.0", (0, 3), id="dots, in order"),
            pytest.param("0_3_x", (0, 3), id="underscores, a word left out"),
            pytest.param("", (), id="empty"),
        ],
    )
    def test_index_lists_an_operator_writes(self, text: str, want: tuple[int, ...]) -> None:
        assert parse_index_list(text) == want

    def test_a_taint_value_is_a_label_value(self) -> None:
        assert taint_value("NVML GPU is lost!") == "NVML-GPU-is-lost"
        assert len(taint_value("x" * 100)) == 63

    def test_taint_unhealthy_marks_the_gpu_and_its_partitions(self) -> None:
        shape = GpuShape(count=2, model="A100", productName="A100", mig="a100-80gb")
        published = [taint_unhealthy(s, {1: "bad"}) for s in gpu_node_slices("n", shape)]
        marks = tainted(published)
        # gpu-1 and each of its MIG placements (parentIndex 1); nothing of gpu-0
        assert marks["gpu-1"] == [f"{UNHEALTHY_TAINT_KEY}:NoSchedule"]
        assert all(name.startswith("gpu-1") for name in marks)
        assert len(marks) > 1

    def test_slice_gpus_reads_index_uuid_memory_and_hard_taints(self) -> None:
        def device(index: int, effect: str | None) -> dict[str, Any]:
            return {
                "name": f"gpu-{index}",
                "attributes": {
                    "type": {"string": "gpu"},
                    "index": {"int": index},
                    "uuid": {"string": f"GPU-{index}"},
                },
                "capacity": {"memory": {"value": "40Gi"}},
                "taints": [{"key": "k", "value": "v", "effect": effect}] if effect else [],
            }

        published = ResourceSlice.model_validate(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "s"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": "n",
                    "pool": {"name": "n", "resourceSliceCount": 1},
                    "devices": [
                        device(2, "None"),
                        device(0, "NoExecute"),
                        device(1, "NoSchedule"),
                    ],
                },
            }
        )
        found = slice_gpus([published], "n", DRIVER)
        assert [(g.index, g.uuid, g.memory_mib, g.healthy) for g in found] == [
            (0, "GPU-0", 40960, False),
            (1, "GPU-1", 40960, False),
            (2, "GPU-2", 40960, True),  # effect None only informs
        ]
        assert slice_gpus([published], "other", DRIVER) == []


class Nvml:
    """Three GPUs of 24 GiB: GPU 1 is lost, GPU 2 has a failed row remapping."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return 3

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index == 1:
            raise self.NVMLError("GPU is lost")
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA L4"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle}0"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=24 * 2**30)

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        return (0, 0)

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        return (0, 1, 0, 1) if handle == 2 else (0, 0, 0, 0)

    def __getattr__(self, name: str) -> Any:
        def missing(*_args: object) -> object:
            raise self.NVMLError(f"{name}: Not Supported")

        return missing


class TestBackends:
    def test_local_nvml_lost_and_remap_failed_gpus_are_unhealthy(self, tmp_path: Path) -> None:
        local = LocalBackend(
            tmp_path / "run", node_name="box", cpu_milli=1000, memory_mib=1024, nvml=Nvml()
        )
        inventory = local.inventory()
        (node,) = inventory.nodes
        assert (node.gpu_count, node.gpu_model, node.gpu_memory_mib) == (3, "L4", 24576)
        # GPU 1 unreadable (no UUID): UUIDs are not given, since they would not line up
        assert node.annotations[UNHEALTHY_GPUS_ANNOTATION] == "1,2"
        assert GPU_UUIDS_ANNOTATION not in node.annotations
        assert set(tainted(list(inventory.slices))) == {"gpu-1", "gpu-2"}

    def test_local_nvml_all_well_gives_uuids(self, tmp_path: Path) -> None:
        nvml = Nvml()
        nvml.nvmlDeviceGetHandleByIndex = lambda index: index  # type: ignore[method-assign]
        nvml.nvmlDeviceGetRemappedRows = lambda handle: (0, 0, 0, 0)  # type: ignore[method-assign]
        local = LocalBackend(
            tmp_path / "run", node_name="box", cpu_milli=1000, memory_mib=1024, nvml=nvml
        )
        (node,) = local.inventory().nodes
        assert node.annotations[GPU_UUIDS_ANNOTATION] == "GPU-00,GPU-10,GPU-20"
        assert UNHEALTHY_GPUS_ANNOTATION not in node.annotations

    def test_slurm_memory_and_health_from_node_features(self) -> None:
        entry = {
            "name": "n1",
            "cpus": 8,
            "real_memory": 32000,
            "gres": "gpu:a100:4",
            "state": "idle",
            "partitions": ["gpu"],
            "active_features": "gpumem_40Gi,gpu_unhealthy_2,gpu_unhealthy_7,ib",
        }
        found = read_nodes([entry], gpu_memory="80Gi")
        info = found.by_name["n1"].info
        assert info.gpu_memory_mib == 40960  # the feature, not the option's 80Gi
        assert info.annotations[UNHEALTHY_GPUS_ANNOTATION] == "2"  # 7: no such GPU
        assert GPU_UUIDS_ANNOTATION not in info.annotations  # Slurm knows none
        assert set(tainted(list(found.slices))) == {"gpu-2"}
        memory = {d.capacity["memory"].value for s in found.slices for d in s.spec.devices}
        assert memory == {"40960Mi"}

    def test_slurm_without_features_keeps_the_option(self) -> None:
        entry = {"name": "n1", "cpus": 8, "gres": "gpu:a100:2", "state": "idle"}
        info = read_nodes([entry], gpu_memory="80Gi").by_name["n1"].info
        assert info.gpu_memory_mib == 81920
        assert UNHEALTHY_GPUS_ANNOTATION not in info.annotations

    def test_ray_health_from_a_node_label(self) -> None:
        entry = {
            "NodeID": "ab" * 28,
            "Alive": True,
            "Resources": {"CPU": 8.0, "GPU": 4.0, "accelerator_type:L4": 1.0},
            "Labels": {"aipaas.dev/gpu-memory": "24Gi", "aipaas.dev/unhealthy-gpus": "1.3"},
        }
        nodes = nodes_of([entry])
        info = nodes[0].info
        assert info.gpu_memory_mib == 24576
        assert info.annotations[UNHEALTHY_GPUS_ANNOTATION] == "1,3"
        assert set(tainted(slices_of(nodes))) == {"gpu-1", "gpu-3"}

    def test_kubernetes_dra_slice_uuids_memory_and_taints(self) -> None:
        def device(index: int, effect: str | None) -> dict[str, Any]:
            return {
                "name": f"gpu-{index}",
                "attributes": {
                    "type": {"string": "gpu"},
                    "index": {"int": index},
                    "uuid": {"string": f"GPU-k{index}"},
                    "productName": {"string": "NVIDIA H100"},
                },
                "capacity": {"memory": {"value": "80Gi"}},
                "taints": [{"key": "nvidia.com/xid", "value": "79", "effect": effect}]
                if effect
                else [],
            }

        node = {
            "metadata": {"name": "k1", "labels": {}},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}},
        }
        published = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "k1-gpus"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "k1",
                "pool": {"name": "k1", "resourceSliceCount": 1},
                "devices": [device(0, None), device(1, "NoExecute"), device(2, "None")],
            },
        }
        found = kube_inventory([node], [], [published], [], set())
        (info,) = found.nodes
        assert (info.gpu_count, info.gpu_memory_mib) == (3, 81920)
        assert info.annotations[GPU_UUIDS_ANNOTATION] == "GPU-k0,GPU-k1,GPU-k2"
        assert info.annotations[UNHEALTHY_GPUS_ANNOTATION] == "1"


class TestPlacement:
    def test_the_scheduler_sees_uuids_and_unhealthy_gpus_from_annotations(self) -> None:
        node = NodeInfo(
            name="n",
            backend="local",
            cpu_milli=8000,
            memory_mib=8192,
            gpu_count=2,
            gpu_model="L4",
            gpu_memory_mib=24576,
            annotations={GPU_UUIDS_ANNOTATION: "GPU-a,GPU-b", UNHEALTHY_GPUS_ANNOTATION: "1"},
        )
        placer = Placer([node], "default")
        (spec,) = placer.ordinary.state.nodes
        assert spec.gpu_uuids == ("GPU-a", "GPU-b")
        assert spec.unhealthy_gpus == (1,)


@pytest.mark.gpu
def test_real_gpus_report_uuids_memory_and_health(tmp_path: Path) -> None:
    """On a machine with NVIDIA GPUs: the local node names every GPU's UUID in NVML's order,
    its memory, and no GPU unhealthy unless NVML says one needs a reset."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        pytest.skip(f"no NVIDIA GPU here: NVML could not start ({err}); the real-GPU check skips")
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        raw = [pynvml.nvmlDeviceGetUUID(h) for h in handles]
        uuids = [u.decode() if isinstance(u, bytes) else str(u) for u in raw]
        memory = int(pynvml.nvmlDeviceGetMemoryInfo(handles[0]).total) // 2**20 if handles else 0
    finally:
        pynvml.nvmlShutdown()
    if not uuids:
        pytest.skip("NVML started but reports no GPU; the real-GPU check skips")
    local = LocalBackend(tmp_path / "run", node_name="box", cpu_milli=1000, memory_mib=1024)
    (node,) = local.inventory().nodes
    assert node.annotations[GPU_UUIDS_ANNOTATION] == ",".join(uuids)
    assert (node.gpu_count, node.gpu_memory_mib) == (len(uuids), memory)
    assert UNHEALTHY_GPUS_ANNOTATION not in node.annotations  # a lent GPU is a healthy one
