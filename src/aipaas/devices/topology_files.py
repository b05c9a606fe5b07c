"""Topology files for simulated nodes, and the ResourceSlices they publish.

Who calls it: the sim backend (inventory of its virtual nodes), tests, benchmarks, docs
examples. Pure apart from reading the one YAML file it is given (or a built-in one).

A file names node shapes; each shape has a GPU description (model, memory, topology groups,
MIG profile set or sharing). ``topology_slices`` turns a file into the slices a backend would
publish: one slice per node (or, for MIG nodes, one per GPU, so that no slice exceeds 128
devices), driver ``gpu.nvidia.com``, pool = node name.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from aipaas.api.devices import ResourceSlice
from aipaas.devices.mig import COMPUTE_SLICES, MEMORY_SLICES, placements

__all__ = [
    "DRIVER",
    "GpuShape",
    "NodeShape",
    "TopologyError",
    "TopologyFile",
    "builtin_topologies",
    "gpu_node_slices",
    "load_topology",
    "topology_slices",
]

DRIVER: Final = "gpu.nvidia.com"
PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"


class TopologyError(ValueError):
    """A topology file that cannot be read; the message names the file, field and reason."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuShape(_Strict):
    count: int = Field(ge=1, le=64)
    model: str
    productName: str
    architecture: str = ""
    computeCapability: str = ""
    driverVersion: str = ""
    memory: str = "80Gi"
    multiprocessors: int = Field(default=0, ge=0)
    nvlinkDomains: list[list[int]] = Field(default_factory=list)
    numaNodes: list[list[int]] = Field(default_factory=list)
    pcieRoots: list[list[int]] = Field(default_factory=list)
    mig: str | None = None
    shared: bool = False

    @model_validator(mode="after")
    def _groups_cover_gpus(self) -> GpuShape:
        for field in ("nvlinkDomains", "numaNodes", "pcieRoots"):
            for group in getattr(self, field):
                for index in group:
                    if not 0 <= index < self.count:
                        raise ValueError(f"{field}: GPU index {index} is not below count")
        if self.mig is not None and self.shared:
            raise ValueError("mig and shared cannot both be set")
        return self


class NodeShape(_Strict):
    namePrefix: str = "node-"
    count: int = Field(default=1, ge=1, le=100_000)
    gpus: GpuShape


class TopologyFile(_Strict):
    name: str
    description: str = ""
    nodes: list[NodeShape] = Field(min_length=1)


def builtin_topologies() -> dict[str, Path]:
    """The topology files shipped with aipaas, by name (file stem)."""
    folder = resources.files("aipaas.devices") / "topologies"
    return {
        Path(str(entry)).stem: Path(str(entry))
        for entry in folder.iterdir()
        if str(entry).endswith(".yaml")
    }


def load_topology(path: str | Path) -> TopologyFile:
    """Read and validate one topology file (a built-in name like "h100-hgx-8gpu" also works).

    Raises:
        TopologyError: unreadable YAML or a field that does not validate.
    """
    builtin = builtin_topologies()
    file = builtin[str(path)] if str(path) in builtin else Path(path)
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
        return TopologyFile.model_validate(data)
    except OSError as err:
        raise TopologyError(f"{file}: cannot read: {err}") from err
    except yaml.YAMLError as err:
        raise TopologyError(f"{file}: invalid YAML: {err}") from err
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise TopologyError(f"{file}: {where}: {first['msg']}") from err


def topology_slices(topology: TopologyFile, *, scale: int = 1) -> list[ResourceSlice]:
    """The slices of every node of the file (each shape's count multiplied by ``scale``)."""
    slices: list[ResourceSlice] = []
    for shape in topology.nodes:
        for index in range(shape.count * scale):
            slices.extend(gpu_node_slices(f"{shape.namePrefix}{index}", shape.gpus))
    return slices


def gpu_node_slices(node: str, gpus: GpuShape) -> list[ResourceSlice]:
    """What a node with these GPUs publishes (pool = node name, driver gpu.nvidia.com)."""
    if gpus.mig is None:
        devices = [_gpu_device(node, gpus, i) for i in range(gpus.count)]
        return [_slice(node, f"{node}-gpus", devices, [], 1)]
    out = []
    for i in range(gpus.count):
        devices = [_gpu_device(node, gpus, i), *_mig_devices(node, gpus, i)]
        counters = [
            {
                "name": f"gpu-{i}-counters",
                "counters": {
                    **{f"memory-slice-{s}": {"value": "1"} for s in range(MEMORY_SLICES)},
                    "compute-slices": {"value": str(COMPUTE_SLICES)},
                },
            }
        ]
        out.append(_slice(node, f"{node}-gpu-{i}", devices, counters, gpus.count))
    return out


def _slice(
    node: str,
    name: str,
    devices: list[dict[str, Any]],
    counters: list[dict[str, Any]],
    slice_count: int,
) -> ResourceSlice:
    return ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": slice_count},
                "devices": devices,
                "sharedCounters": counters,
            },
        }
    )


def _group_of(groups: list[list[int]], index: int) -> int | None:
    for number, group in enumerate(groups):
        if index in group:
            return number
    return None


def _uuid(node: str, index: int, suffix: str = "") -> str:
    digest = hashlib.sha256(f"{node}/{index}/{suffix}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _gpu_device(node: str, gpus: GpuShape, index: int) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "type": {"string": "gpu"},
        "index": {"int": index},
        "uuid": {"string": _uuid(node, index)},
        "model": {"string": gpus.model},
        "productName": {"string": gpus.productName},
        "pciBusID": {"string": f"0000:{0x18 + 0x10 * index:02x}:00.0"},
        "migEnabled": {"bool": gpus.mig is not None},
    }
    if gpus.architecture:
        attributes["architecture"] = {"string": gpus.architecture}
    if gpus.computeCapability:
        attributes["cudaComputeCapability"] = {"version": _semver(gpus.computeCapability)}
    if gpus.driverVersion:
        attributes["driverVersion"] = {"version": _semver(gpus.driverVersion)}
    nvlink = _group_of(gpus.nvlinkDomains, index)
    if nvlink is not None:
        attributes["nvlinkDomain"] = {"string": f"{node}-nvl{nvlink}"}
    numa = _group_of(gpus.numaNodes, index)
    if numa is not None:
        attributes["numaNode"] = {"int": numa}
    root = _group_of(gpus.pcieRoots, index)
    if root is not None:
        attributes[PCIE_ROOT] = {"string": f"pci0000:{root:02x}"}
    capacity: dict[str, Any] = {"memory": {"value": gpus.memory}}
    if gpus.multiprocessors:
        capacity["multiprocessors"] = {"value": str(gpus.multiprocessors)}
    device: dict[str, Any] = {"name": f"gpu-{index}", "attributes": attributes}
    if gpus.shared:
        device["allowMultipleAllocations"] = True
        capacity["memory"]["requestPolicy"] = {
            "default": "1Gi",
            "validRange": {"min": "1Gi", "step": "1Gi"},
        }
        capacity["compute"] = {
            "value": "100",
            "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "100"}},
        }
        capacity.pop("multiprocessors", None)
    if gpus.mig is not None:
        device["consumesCounters"] = [
            {
                "counterSet": f"gpu-{index}-counters",
                "counters": {
                    **{f"memory-slice-{s}": {"value": "1"} for s in range(MEMORY_SLICES)},
                    "compute-slices": {"value": str(COMPUTE_SLICES)},
                },
            }
        ]
    device["capacity"] = capacity
    return device


def _mig_devices(node: str, gpus: GpuShape, index: int) -> list[dict[str, Any]]:
    devices = []
    parent = _gpu_device(node, gpus, index)["attributes"]
    for profile, start in placements(gpus.mig or ""):
        label = profile.name.replace(".", "-")
        attributes = {
            "type": {"string": "mig"},
            "profile": {"string": profile.name},
            "model": {"string": gpus.model},
            "productName": {"string": gpus.productName},
            "parentIndex": {"int": index},
            "parentUUID": parent["uuid"],
            "placementStart": {"int": start},
            "uuid": {"string": _uuid(node, index, f"{profile.name}@{start}").replace("GPU", "MIG")},
        }
        for key in ("nvlinkDomain", "numaNode", PCIE_ROOT, "cudaComputeCapability"):
            if key in parent:
                attributes[key] = parent[key]
        slices = range(start, start + profile.memory_slices)
        devices.append(
            {
                "name": f"gpu-{index}-mig-{label}-{start}",
                "attributes": attributes,
                "capacity": {
                    "memory": {"value": f"{profile.memory_gib}Gi"},
                    "multiprocessors": {
                        "value": str(gpus.multiprocessors * profile.compute // COMPUTE_SLICES)
                    },
                },
                "consumesCounters": [
                    {
                        "counterSet": f"gpu-{index}-counters",
                        "counters": {
                            **{f"memory-slice-{s}": {"value": "1"} for s in slices},
                            "compute-slices": {"value": str(profile.compute)},
                        },
                    }
                ],
            }
        )
    return devices


def _semver(text: str) -> str:
    parts = ([*text.split("."), "0", "0"])[:3]
    return ".".join(str(int(p)) for p in parts)
