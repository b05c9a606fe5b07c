"""A GPU share started through the local backend: its task's environment holds the limits of
what this machine enforces shares with (MPS, else HAMi-core), and the job's status says so per
task (``status.tasks[].gpuShare``), or says the share is not enforced when the machine has
neither, and then the task gets no such variable."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from aipaas.api.devices import ResourceSlice
from aipaas.backends.local import LocalBackend
from aipaas.controller.cycle import Controller
from tests.support.ctl_world import World, cycle_until

DRIVER = "gpu.nvidia.com"
WATCHED = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    "CUDA_DEVICE_MEMORY_LIMIT_0",
    "CUDA_DEVICE_SM_LIMIT",
    "LD_PRELOAD",
)


def gpu(index: int) -> dict[str, Any]:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "index": {"int": index},
            "uuid": {"string": f"GPU-{index:04d}"},
            "model": {"string": "L4"},
        },
        "capacity": {"memory": {"value": "10000Mi"}},
    }


def two_gpus() -> ResourceSlice:
    """Two GPUs of 10000Mi, as nvml.py would publish them."""
    return ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"here-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "here",
                "pool": {"name": "here", "resourceSliceCount": 1},
                "devices": [gpu(0), gpu(1)],
            },
        }
    )


def local(world: World, **enforcement: Any) -> Controller:
    world.setup("{gpu: 8, cpu: 64, memory: 512Gi}")
    backend = LocalBackend(
        world.tmp / "run",
        node_name="here",
        cpu_milli=8000,
        memory_mib=8192,
        published=two_gpus(),
        **enforcement,
    )
    return world.controller(backend, inventory_seconds=0)


def run_share(world: World, controller: Controller, out: Path, gpu_form: str) -> dict[str, str]:
    script = (
        "import json, os; "
        f"json.dump({{k: os.environ[k] for k in {WATCHED!r} if k in os.environ}}, "
        f"open({str(out / 'env.json')!r}, 'w'))"
    )
    world.submit(
        "shared",
        f"    - name: worker\n      command: [{sys.executable}, -c, {script!r}]\n"
        f"      resources: {{cpu: 1, memory: 64Mi, gpu: {gpu_form}}}\n",
    )
    cycle_until(controller, lambda: world.phase("shared") in ("Succeeded", "Failed"))
    assert world.phase("shared") == "Succeeded"
    seen: dict[str, str] = json.loads((out / "env.json").read_text())
    return seen


def share_note(world: World) -> str | None:
    status = world.job("shared").status
    assert status is not None
    return status.tasks[0].gpu_share


def test_mps_limits_reach_the_task_and_its_status(world: World, tmp_path: Path) -> None:
    controller = local(world, gpu_share_mps=True)
    env = run_share(world, controller, tmp_path, "{count: 1, memory: 3000Mi, cores: 30}")
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=3000M"  # its one visible device
    assert env["CUDA_VISIBLE_DEVICES"] in ("0", "1")
    assert share_note(world) == (
        "enforced by MPS on node here: 30% of the threads and 3000Mi of its GPU"
    )
    assert "GpuShareEnforced" in world.reasons("shared")


def test_hami_core_limits_a_percent_of_the_gpus_memory(world: World, tmp_path: Path) -> None:
    library = str(tmp_path / "libvgpu.so")  # absent: the loader says so and goes on
    controller = local(world, hami_core_library=library)
    env = run_share(world, controller, tmp_path, "{count: 1, memoryPercent: 25, cores: 10}")
    assert env["LD_PRELOAD"] == library
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2500m"  # 25% of 10000Mi
    assert env["CUDA_DEVICE_SM_LIMIT"] == "10"
    assert share_note(world) == (
        "enforced by HAMi-core on node here: 2500Mi and 10% of the SMs of its GPU"
    )


def test_a_machine_with_neither_says_not_enforced(world: World, tmp_path: Path) -> None:
    controller = local(world)
    env = run_share(world, controller, tmp_path, "{count: 1, memory: 6000Mi, cores: 50}")
    assert set(env) == {"CUDA_VISIBLE_DEVICES"}
    note = share_note(world)
    assert note is not None
    assert note.startswith("not enforced: node here has neither MPS nor HAMi-core")
    assert "GpuShareNotEnforced" in world.reasons("shared")


def test_a_share_names_its_gpu_by_the_uuid_nvml_reported(world: World, tmp_path: Path) -> None:
    """The local node's GPU UUIDs (annotation aipaas.dev/gpu-uuids, from its slice) reach the
    scheduler: a share naming GPU-0001 runs on GPU 1 (the first free one would be GPU 0)."""
    controller = local(world, gpu_share_mps=True)
    env = run_share(world, controller, tmp_path, "{count: 1, memory: 1000Mi, uuids: [GPU-0001]}")
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=1000M"
