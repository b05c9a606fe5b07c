"""What holds a GPU share to its memory and cores on the device: MPS where the node has it, then
HAMi-core, else nothing, and the note then says the share is not enforced.

No upstream table is translated here: the cases are shaped after what HAMi's NVIDIA device
plugin puts in a container's Allocate response (one memory limit per logical GPU, one SM limit,
a shared cache file per container) and after NVIDIA's MPS documentation, and worked by hand
from the variables' documented meaning: MPS's
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (a percent) and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``
(``ordinal=limit`` pairs, comma separated); HAMi-core's ``CUDA_DEVICE_MEMORY_LIMIT_<i>``
(``<n>m``), ``CUDA_DEVICE_SM_LIMIT`` (a percent) and ``LD_PRELOAD``.
"""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.api.resources import GpuRequest
from aipaas.devices.share_enforcement import (
    DEFAULT_HAMI_CORE_LIBRARY,
    ENFORCEMENT_LABEL,
    HAMI_CORE,
    HAMI_CORE_LIBRARY_ANNOTATION,
    MPS,
    ShareLimits,
    enforce,
    node_mechanism,
    share_enforcement_labels,
    share_limits,
)


def gpu(**fields: Any) -> GpuRequest:
    return GpuRequest.model_validate(fields)


class TestShareLimits:
    @pytest.mark.parametrize(
        ("fields", "gpu_memory", "want"),
        [
            pytest.param(
                {"count": 2, "memory": "3000Mi", "cores": 30},
                10000,
                ShareLimits(2, 3000, 30),
                id="memory in MiB and cores, per GPU of two",
            ),
            pytest.param(
                {"count": 1, "memory": "2Gi", "cores": 10},
                0,
                ShareLimits(1, 2048, 10),
                id="2Gi is 2048Mi whatever the GPU's memory",
            ),
            pytest.param(
                {"count": 1, "memoryPercent": 25, "cores": 10},
                81920,
                ShareLimits(1, 20480, 10),
                id="a quarter of an 81920Mi GPU is 20480Mi",
            ),
            pytest.param(
                {"count": 1, "memoryPercent": 25, "cores": 10},
                0,
                ShareLimits(1, None, 10),
                id="a percent of a GPU whose memory is not known is not known",
            ),
            pytest.param(
                {"count": 1, "cores": 50},
                24576,
                ShareLimits(1, 24576, 50),
                id="no memory asked: all of it, as the scheduler fits it",
            ),
            pytest.param(
                {"count": 1, "fraction": 0.25, "memory": "4Gi"},
                16384,
                ShareLimits(1, 4096, 25),
                id="a fraction with a memory takes that fraction of the compute",
            ),
            pytest.param(
                {"count": 1, "indices": [3], "memory": "1000Mi"},
                16384,
                ShareLimits(1, 1000, None),
                id="a share by index without cores promises no compute",
            ),
        ],
    )
    def test_limits_per_gpu(
        self, fields: dict[str, Any], gpu_memory: int, want: ShareLimits
    ) -> None:
        assert share_limits(gpu(**fields), gpu_memory) == want


class TestNodeMechanism:
    @pytest.mark.parametrize(
        ("labels", "annotations", "want"),
        [
            pytest.param({ENFORCEMENT_LABEL: "mps"}, {}, (MPS, ""), id="mps"),
            pytest.param(
                {ENFORCEMENT_LABEL: "hami-core"},
                {HAMI_CORE_LIBRARY_ANNOTATION: "/opt/hami/libvgpu.so"},
                (HAMI_CORE, "/opt/hami/libvgpu.so"),
                id="hami-core at the path the node names",
            ),
            pytest.param(
                {ENFORCEMENT_LABEL: "hami-core"},
                {},
                (HAMI_CORE, DEFAULT_HAMI_CORE_LIBRARY),
                id="hami-core at HAMi's default path",
            ),
            pytest.param({}, {}, (None, ""), id="no label: nothing"),
            pytest.param({ENFORCEMENT_LABEL: "cgroups"}, {}, (None, ""), id="unknown: nothing"),
        ],
    )
    def test_what_the_node_has(
        self, labels: dict[str, str], annotations: dict[str, str], want: tuple[str | None, str]
    ) -> None:
        assert node_mechanism(labels, annotations) == want

    def test_mps_goes_before_hami_core_when_an_operator_sets_up_both(self) -> None:
        assert share_enforcement_labels(True, "/usr/lib/libvgpu.so") == {ENFORCEMENT_LABEL: MPS}
        assert share_enforcement_labels(False, "/usr/lib/libvgpu.so") == {
            ENFORCEMENT_LABEL: HAMI_CORE
        }
        assert share_enforcement_labels(False, None) == {}


class TestEnforce:
    def test_mps_limits_threads_and_each_visible_device_memory(self) -> None:
        found = enforce(ShareLimits(2, 3000, 30), MPS, node="n1")
        assert found.enforced
        assert found.env == {
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=3000M,1=3000M",
        }
        assert found.note == (
            "enforced by MPS on node n1: 30% of the threads and 3000Mi of each of its 2 GPUs"
        )

    def test_hami_core_preloads_its_library_before_the_tasks_own(self) -> None:
        found = enforce(
            ShareLimits(2, 3000, 30),
            HAMI_CORE,
            node="n1",
            library="/usr/local/vgpu/libvgpu.so",
            attempt_key="uid1.worker-0.0",
            preload="/opt/mine.so",
        )
        assert found.enforced
        assert found.env == {
            "LD_PRELOAD": "/usr/local/vgpu/libvgpu.so /opt/mine.so",
            "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
            "CUDA_DEVICE_MEMORY_LIMIT_1": "3000m",
            "CUDA_DEVICE_SM_LIMIT": "30",
            "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/aipaas-vgpu-uid1.worker-0.0.cache",
        }
        assert found.note == (
            "enforced by HAMi-core on node n1: 3000Mi and 30% of the SMs of each of its 2 GPUs"
        )

    def test_a_node_with_neither_says_the_share_is_a_promise_only(self) -> None:
        found = enforce(ShareLimits(1, 6000, 50), None, node="n1")
        assert not found.enforced
        assert found.env == {}
        assert found.note == (
            "not enforced: node n1 has neither MPS nor HAMi-core, so 6000Mi and 50% of the "
            "compute of its GPU is a scheduling promise only"
        )

    def test_a_share_without_cores_is_limited_in_memory_only_and_says_so(self) -> None:
        found = enforce(ShareLimits(1, 1000, None), MPS, node="n1")
        assert found.enforced
        assert found.env == {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1000M"}
        assert found.note.endswith("; compute is not limited (the share asks for no cores)")

    def test_unknown_memory_is_not_limited_and_says_so(self) -> None:
        found = enforce(ShareLimits(1, None, 20), HAMI_CORE, node="n1", library="/l.so")
        assert found.env["CUDA_DEVICE_SM_LIMIT"] == "20"
        assert not any(k.startswith("CUDA_DEVICE_MEMORY_LIMIT") for k in found.env)
        assert found.note.endswith("; memory is not limited (the GPU's memory is not known)")

    def test_nothing_to_limit_sets_nothing_and_claims_nothing(self) -> None:
        found = enforce(ShareLimits(1, None, None), MPS, node="n1")
        assert not found.enforced
        assert found.env == {}
        assert found.note.startswith("not enforced: MPS on node n1 has no limit to set")
