"""Builders for device tests: slices, classes, claims, allocated claims, in a few words each."""

from __future__ import annotations

from typing import Any

from aipaas.api.devices import DeviceClass, ResourceClaim, ResourceSlice

DRIVER = "gpu.example.com"


def gpu(
    name: str,
    *,
    model: str = "H100",
    memory: str = "80Gi",
    nvlink: int | None = None,
    numa: int | None = None,
    pcie: int | None = None,
    kind: str = "gpu",
    attrs: dict[str, Any] | None = None,
    capacity: dict[str, Any] | None = None,
    consumes: dict[str, str] | None = None,
    counter_set: str = "gpu-0-counters",
    multiple: bool = False,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    attributes: dict[str, Any] = {"type": {"string": kind}, "model": {"string": model}}
    if nvlink is not None:
        attributes["nvlinkDomain"] = {"string": f"nvl{nvlink}"}
    if numa is not None:
        attributes["numaNode"] = {"int": numa}
    if pcie is not None:
        attributes["resource.kubernetes.io/pcieRoot"] = {"string": f"pci{pcie}"}
    for key, value in (attrs or {}).items():
        attributes[key] = value
    device: dict[str, Any] = {
        "name": name,
        "attributes": attributes,
        "capacity": capacity or {"memory": {"value": memory}},
    }
    if consumes:
        device["consumesCounters"] = [
            {"counterSet": counter_set, "counters": {k: {"value": v} for k, v in consumes.items()}}
        ]
    if multiple:
        device["allowMultipleAllocations"] = True
    if taints:
        device["taints"] = taints
    return device


def eight_h100() -> list[dict[str, Any]]:
    """gpu-0..7: NVLink domains and NUMA nodes {0-3}, {4-7}; PCIe roots in pairs."""
    return [gpu(f"gpu-{i}", nvlink=i // 4, numa=i // 4, pcie=i // 2) for i in range(8)]


def node_slice(
    node: str,
    devices: list[dict[str, Any]],
    *,
    counters: dict[str, dict[str, str]] | None = None,
    driver: str = DRIVER,
) -> ResourceSlice:
    spec: dict[str, Any] = {
        "driver": driver,
        "nodeName": node,
        "pool": {"name": node},
        "devices": devices,
    }
    if counters:
        spec["sharedCounters"] = [
            {"name": name, "counters": {k: {"value": v} for k, v in values.items()}}
            for name, values in counters.items()
        ]
    return ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}"},
            "spec": spec,
        }
    )


def device_class(name: str, *expressions: str) -> DeviceClass:
    return DeviceClass.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
        }
    )


CLASSES = {
    c.metadata.name or "": c
    for c in (
        device_class("gpu", f'device.driver == "{DRIVER}"'),
        device_class("whole-gpu", f'device.attributes["{DRIVER}"].type == "gpu"'),
        device_class("mig", f'device.attributes["{DRIVER}"].type == "mig"'),
        device_class("tpu", 'device.driver == "tpu.example.com"'),
    )
}


def req(
    name: str,
    cls: str = "gpu",
    *,
    count: int | None = None,
    all_: bool = False,
    sel: tuple[str, ...] = (),
    admin: bool = False,
    capacity: dict[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls}
    if count is not None:
        body["count"] = count
    if all_:
        body["allocationMode"] = "All"
    if sel:
        body["selectors"] = [{"cel": {"expression": e}} for e in sel]
    if admin:
        body["adminAccess"] = True
    if capacity:
        body["capacity"] = {"requests": capacity}
    if tolerations:
        body["tolerations"] = tolerations
    return {"name": name, "exactly": body}


def first(name: str, *subrequests: dict[str, Any]) -> dict[str, Any]:
    subs = [{"name": s["name"], **s["exactly"]} for s in subrequests]
    return {"name": name, "firstAvailable": subs}


def claim(
    name: str, *requests: dict[str, Any], constraints: list[dict[str, Any]] | None = None
) -> ResourceClaim:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": devices},
        }
    )


def allocated(
    name: str,
    node: str,
    *devices: str,
    consumed: dict[str, str] | None = None,
    driver: str = DRIVER,
) -> ResourceClaim:
    """A claim that already holds devices of ``node``'s pool (consumed: a share of each)."""
    results = []
    for device in devices:
        result: dict[str, Any] = {"request": "r", "driver": driver, "pool": node, "device": device}
        if consumed:
            result["consumedCapacity"] = consumed
        results.append(result)
    return ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [req("r")]}},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )
