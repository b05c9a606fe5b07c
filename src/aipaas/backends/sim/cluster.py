"""A simulated cluster from YAML; DGX-like H100 nodes by default.

    nodes:
      - {name: dgx, count: 2, cpu: 224, memory: 2Ti, gpus: {count: 8, model: H100, memory: 80Gi}}

``count`` > 1 names the nodes ``dgx-0``, ``dgx-1``, ...
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aipaas.api.meta import Name
from aipaas.api.quantity import QuantityStr, parse_quantity
from aipaas.backends.base import NodeInfo

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


class _Cluster(BaseModel):
    model_config = ConfigDict(extra="forbid")
    nodes: list[_NodeGroup] = Field(min_length=1)


def load_cluster(path: Path | None = None) -> list[NodeInfo]:
    text = path.read_text() if path is not None else DEFAULT_CLUSTER
    try:
        cluster = _Cluster.model_validate(yaml.safe_load(text))
    except ValidationError as err:
        raise ValueError(f"simulated cluster {path or '(default)'}: {err}") from err
    nodes: list[NodeInfo] = []
    for group in cluster.nodes:
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
    return nodes
