"""Node: a machine as a backend reports it. Written by the controller, read by everyone."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from aipaas.api.meta import LenientModel, Model, Object
from aipaas.api.quantity import QuantityStr


class NodeGpus(Model):
    count: int = Field(default=0, ge=0, le=1024)
    model: str = Field(default="", max_length=64)
    memory: QuantityStr | None = None


class NodeSpec(Model):
    backend: str = Field(min_length=1, max_length=64)
    cpu: QuantityStr
    memory: QuantityStr
    gpus: NodeGpus = Field(default_factory=NodeGpus)


class NodeStatus(LenientModel):
    ready: bool = True
    allocated_cpu: str = "0"
    allocated_memory: str = "0"
    allocated_gpus: float = 0


class Node(Object):
    namespaced: ClassVar[bool] = False
    plural: ClassVar[str] = "nodes"

    kind: Literal["Node"] = "Node"
    spec: NodeSpec
    status: NodeStatus | None = None
