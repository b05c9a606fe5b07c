"""Names of the DRA drivers whose devices aipaas publishes or reads itself (the local and Ray
backends' NVML inventory, the topology files); imported by devices/ and backends/."""

from __future__ import annotations

from typing import Final

#: NVIDIA's DRA driver, whose attribute names the published slices use
NVIDIA_GPU: Final = "gpu.nvidia.com"
