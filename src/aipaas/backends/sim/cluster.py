"""A simulated cluster from YAML; DGX-like H100 nodes by default.

    nodes:
      - {name: dgx, count: 2, cpu: 224, memory: 2Ti, gpus: {count: 8, model: H100, memory: 80Gi}}

``count`` > 1 names the nodes ``dgx-0``, ``dgx-1``, ...
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aipaas.api.devices import ResourceSlice
from aipaas.api.meta import Name
from aipaas.api.quantity import QuantityStr, parse_quantity
from aipaas.backends.base import NodeInfo
from aipaas.devices.topology_files import (
    GpuShape,
    TopologyError,
    builtin_topologies,
    gpu_node_slices,
    load_topology,
)

DEFAULT_CLUSTER = """
nodes:
  - {name: sim-dgx, count: 2, cpu: 224, memory: 2Ti, gpus: {count: 8, model: H100, memory: 80Gi}}
"""


class _Gpus(BaseModel):
    model_config = ConfigDict(extra="forbid")
    count: int = Field(default=0, ge=0, le=64)
    model: str = ""
    memory: QuantityStr = "0"


class _NodeGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    count: int = Field(default=1, ge=1, le=10000)
    cpu: QuantityStr
    memory: QuantityStr
    gpus: _Gpus = Field(default_factory=_Gpus)
    labels: dict[str, str] = Field(default_factory=dict)
    # The GPU topology its nodes publish as ResourceSlices: a built-in name (h100-hgx-8gpu,
    # a100-mig-8gpu, ...) or a file. Default: the built-in one of the same model and count.
    topology: str | None = Field(default=None, max_length=4096)


class _Cluster(BaseModel):
    model_config = ConfigDict(extra="forbid")
    nodes: list[_NodeGroup] = Field(min_length=1)


def load_cluster(path: Path | None = None) -> list[NodeInfo]:
    return load_cluster_with_slices(path)[0]


def load_cluster_with_slices(
    path: Path | None = None,
) -> tuple[list[NodeInfo], list[ResourceSlice]]:
    """The nodes of a cluster file and the ResourceSlices their GPUs publish."""
    text = path.read_text() if path is not None else DEFAULT_CLUSTER
    try:
        cluster = _Cluster.model_validate(yaml.safe_load(text))
    except ValidationError as err:
        raise ValueError(f"simulated cluster {path or '(default)'}: {err}") from err
    nodes: list[NodeInfo] = []
    slices: list[ResourceSlice] = []
    for group in cluster.nodes:
        shape = _gpu_shape(group, str(path or "(default)"))
        for index in range(group.count):
            name = group.name if group.count == 1 else f"{group.name}-{index}"
            nodes.append(
                NodeInfo(
                    name=name,
                    backend="sim",
                    cpu_milli=int(parse_quantity(group.cpu) * 1000),
                    memory_mib=int(parse_quantity(group.memory) // 2**20),
                    gpu_count=group.gpus.count,
                    gpu_model=group.gpus.model,
                    gpu_memory_mib=int(parse_quantity(group.gpus.memory) // 2**20),
                    labels={"aipaas.dev/backend": "sim", **group.labels},
                )
            )
            if shape is not None:
                slices.extend(gpu_node_slices(name, shape))
    return nodes, slices


def _gpu_shape(group: _NodeGroup, where: str) -> GpuShape | None:
    """The GPU shape of a group: its topology's first node shape, else a built-in of the same
    model and count, else a plain one (no NVLink, NUMA or PCIe groups)."""
    if group.gpus.count == 0:
        return None
    if group.topology is not None:
        try:
            return load_topology(group.topology).nodes[0].gpus
        except (TopologyError, KeyError) as err:
            raise ValueError(f"simulated cluster {where}: nodes {group.name}: {err}") from err
    for name in sorted(builtin_topologies()):
        gpus = load_topology(name).nodes[0].gpus
        if gpus.model == group.gpus.model and gpus.count == group.gpus.count and not gpus.mig:
            return gpus
    memory = int(parse_quantity(group.gpus.memory) // 2**30) if group.gpus.memory != "0" else 0
    return GpuShape(
        count=group.gpus.count,
        model=group.gpus.model or "GPU",
        productName=group.gpus.model or "GPU",
        memory=f"{memory}Gi" if memory else "80Gi",
    )
