"""The demo's fake GPUs: offered only when NVML finds none, published as GPUs the scheduler can
give, and named as fake in the node's label and annotation, the task's log and its status."""

from __future__ import annotations

import os
import time
from pathlib import Path

from aipaas.backends.base import ClaimDevice, LaunchRequest, TaskState
from aipaas.backends.local import LocalBackend
from aipaas.backends.local.fake_gpus import FAKE_LABEL, FAKE_MODEL
from aipaas.backends.local.nvml import DRIVER
from aipaas.backends.registry import DEMO_FAKE_GPUS, make_backend
from tests.unit.backends.test_gpu_discovery import Nvml as FakeNvml


def no_driver() -> FakeNvml:
    nvml = FakeNvml(count=0)
    nvml.init_error = (12, "NVML Shared Library Not Found")
    return nvml


def backend(tmp_path: Path, nvml: FakeNvml, fake_gpus: int) -> LocalBackend:
    return LocalBackend(
        tmp_path / "run",
        node_name="here",
        cpu_milli=4000,
        memory_mib=1024,
        environ={"PATH": os.environ["PATH"]},
        nvml=nvml,
        fake_gpus=fake_gpus,
    )


def test_without_a_gpu_the_node_offers_fake_ones_and_says_so(tmp_path: Path) -> None:
    node = backend(tmp_path, no_driver(), 3).inventory().nodes[0]
    assert (node.gpu_count, node.gpu_model) == (3, FAKE_MODEL)
    assert node.labels[FAKE_LABEL] == "true"
    assert "3 fake GPU(s)" in node.annotations["aipaas.dev/gpu-discovery"]


def test_real_gpus_are_offered_instead_of_fake_ones(tmp_path: Path) -> None:
    node = backend(tmp_path, FakeNvml(count=2), 4).inventory().nodes[0]
    assert (node.gpu_count, node.gpu_model) == (2, "H100")
    assert FAKE_LABEL not in node.labels


def test_without_fake_gpus_asked_a_machine_without_gpus_offers_none(tmp_path: Path) -> None:
    assert backend(tmp_path, no_driver(), 0).inventory().nodes[0].gpu_count == 0


def test_a_task_on_fake_gpus_runs_and_its_log_and_status_say_they_are_fake(
    tmp_path: Path,
) -> None:
    local = backend(tmp_path, no_driver(), 2)
    log = tmp_path / "logs" / "t1.log"
    local.start(
        LaunchRequest(
            request_id="t1",
            task="main-0",
            job="j",
            tenant="acme",
            node="here",
            command=("sh", "-c", 'echo "seen $CUDA_VISIBLE_DEVICES $AIPAAS_FAKE_GPUS"'),
            env={},
            working_dir=None,
            gpus=(1,),
            gpu_milli=1000,
            log_path=str(log),
            devices=(ClaimDevice(DRIVER, "here", "gpu-1"),),
        )
    )
    deadline = time.monotonic() + 60
    while local.status(["t1"])["t1"].state is TaskState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.05)
    status = local.status(["t1"])["t1"]
    assert status.state is TaskState.SUCCEEDED, status
    assert "fake GPU(s) 1" in status.message
    first, *rest = log.read_text().splitlines()
    assert "GPU(s) 1 are FAKE" in first
    assert "seen 1 1" in rest


def test_the_demo_backend_asks_for_fake_gpus_and_local_alone_does_not(tmp_path: Path) -> None:
    demo = make_backend("demo", tmp_path / "demo")
    local = make_backend("local", tmp_path / "local")
    try:
        demo_nodes = {n.backend: n for n in demo.inventory().nodes}
        if demo_nodes["local"].gpu_model == FAKE_MODEL:  # a machine without an NVIDIA GPU
            assert demo_nodes["local"].gpu_count == DEMO_FAKE_GPUS
            assert local.inventory().nodes[0].gpu_count == 0
    finally:
        demo.close()
        local.close()
