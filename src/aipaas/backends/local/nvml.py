"""This machine's NVIDIA GPUs as a resource.k8s.io/v1 ResourceSlice, read through NVML.

Who calls it: the local backend's inventory. Reads NVML (the NVIDIA driver's library) and
nothing else. Without the library or without a GPU it publishes an empty slice; an NVML error
is returned with the slice (``discover``), for the backend to report, never swallowed.

Each GPU is a device ``gpu-<index>`` of driver ``gpu.nvidia.com`` with the attributes NVML
gives: type, index, uuid, productName, model (short: "H100"), architecture,
cudaComputeCapability and driverVersion (versions), migEnabled, pciBusID, numaNode and the
standard ``resource.kubernetes.io/pcieRoot``; capacity ``memory``. A GPU with MIG enabled is
published as the MIG devices that exist on it (``gpu-<index>-mig-<n>``, type mig, with their
profile and parent), not as a whole GPU.
A GPU NVML cannot read, or whose memory waits for a reset (row remapping failed or pending,
retired pages pending), is published with the taint ``gpu.nvidia.com/unhealthy`` (NoSchedule):
it keeps its index and takes nothing new (devices/gpu_health.py).
NVLink domains are not read yet (see docs/devices.md).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pynvml

from aipaas.api.devices import ResourceSlice
from aipaas.backends.base import LaunchRequest
from aipaas.backends.local.machine import short_model
from aipaas.devices.drivers import NVIDIA_GPU
from aipaas.devices.gpu_health import UNHEALTHY_TAINT_KEY, taint_value

__all__ = ["DRIVER", "Discovery", "discover", "pcie_root", "publish_slice", "visible_devices"]

DRIVER: Final = NVIDIA_GPU
_ARCHITECTURES: Final = {
    2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere",
    8: "Ada Lovelace", 9: "Hopper", 10: "Blackwell", 13: "Rubin",
}  # fmt: skip
_MIG_PROFILE: Final = re.compile(r"MIG\s+(\d+g\.\d+gb)", re.IGNORECASE)


@dataclass(frozen=True)
class Discovery:
    """What one reading of NVML found: the slice, and what went wrong if anything did.

    ``problem`` names an NVML error that hid GPUs (the host may have GPUs it does not offer);
    ``quiet`` is true when the reason is only that this machine has no NVIDIA driver at all.
    """

    slice: ResourceSlice
    problem: str | None = None
    quiet: bool = False


def publish_slice(node: str, nvml: Any = None) -> ResourceSlice:
    """The slice of this node's GPUs (pool = node name); no GPU or no NVML: no devices.

    Args:
        node: the node name (a DNS label).
        nvml: the NVML module (default: pynvml); tests pass a fake.
    """
    return discover(node, nvml).slice


def discover(node: str, nvml: Any = None, devices_dir: Path = Path("/dev")) -> Discovery:
    """Read NVML once: the slice and, when NVML failed, the error (never swallowed).

    A missing NVML library on a machine with no NVIDIA device node is the ordinary CPU-only
    case (``quiet``); any other failure, or a GPU NVML cannot read, is a ``problem``: the GPUs
    read before it are still offered, the failing one is not.
    """
    library = nvml if nvml is not None else pynvml
    devices: list[dict[str, Any]] = []
    try:
        library.nvmlInit()
    except library.NVMLError as err:
        missing = _code(library, err) in _no_driver_codes(library)
        quiet = missing and not any(devices_dir.glob("nvidia[0-9]*"))
        return Discovery(_slice(node, devices), f"NVML could not start: {_reason(err)}", quiet)
    problems: list[str] = []
    try:
        driver_version = _semver(_text(library.nvmlSystemGetDriverVersion()))
        for index in range(library.nvmlDeviceGetCount()):
            try:
                handle = library.nvmlDeviceGetHandleByIndex(index)
                device = _gpu(library, handle, index, driver_version)
                if device["attributes"]["migEnabled"]["bool"]:
                    # CUDA cannot run on a MIG-enabled GPU whole: only its MIG devices are
                    # offered, so no claim gets the GPU while another holds a partition.
                    parts = _mig_devices(library, handle, index, device["attributes"])
                    for part in parts:  # a sick GPU's partitions are as sick
                        part.update({"taints": device["taints"]} if "taints" in device else {})
                    devices.extend(parts)
                else:
                    devices.append(device)
            except library.NVMLError as err:
                problems.append(f"GPU {index}: {_reason(err)}")
                # Offered as unhealthy rather than left out: its index stays its own, so the
                # GPUs after it keep theirs (CUDA_VISIBLE_DEVICES names NVML's indices).
                devices.append(_unreadable_gpu(index, _reason(err)))
    except library.NVMLError as err:
        problems.append(_reason(err))
    finally:
        with contextlib.suppress(library.NVMLError):
            library.nvmlShutdown()
    problem = f"NVML failed: {'; '.join(problems)}" if problems else None
    return Discovery(_slice(node, devices), problem)


def _no_driver_codes(library: Any) -> set[int]:
    return {
        int(getattr(library, "NVML_ERROR_LIBRARY_NOT_FOUND", 12)),
        int(getattr(library, "NVML_ERROR_DRIVER_NOT_LOADED", 9)),
    }


def _code(library: Any, err: Exception) -> int | None:
    value = getattr(err, "value", None)
    if isinstance(value, int):
        return value
    # A module without codes (a fake): read the message NVML would have given.
    text = str(err).lower()
    if "library not found" in text:
        return int(getattr(library, "NVML_ERROR_LIBRARY_NOT_FOUND", 12))
    if "driver not loaded" in text:
        return int(getattr(library, "NVML_ERROR_DRIVER_NOT_LOADED", 9))
    return None


def _reason(err: Exception) -> str:
    return str(err) or type(err).__name__


def _gpu(library: Any, handle: Any, index: int, driver_version: str | None) -> dict[str, Any]:
    name = _text(library.nvmlDeviceGetName(handle))
    attributes: dict[str, Any] = {
        "type": {"string": "gpu"},
        "index": {"int": index},
        "uuid": {"string": _text(library.nvmlDeviceGetUUID(handle))},
        "productName": {"string": name[:64]},
        "model": {"string": short_model(name)[:64]},
    }
    with contextlib.suppress(library.NVMLError):
        architecture = _ARCHITECTURES.get(int(library.nvmlDeviceGetArchitecture(handle)))
        if architecture:
            attributes["architecture"] = {"string": architecture}
    with contextlib.suppress(library.NVMLError):
        major, minor = library.nvmlDeviceGetCudaComputeCapability(handle)
        attributes["cudaComputeCapability"] = {"version": f"{major}.{minor}.0"}
    if driver_version:
        attributes["driverVersion"] = {"version": driver_version}
    mig = False
    with contextlib.suppress(library.NVMLError):
        current, _pending = library.nvmlDeviceGetMigMode(handle)
        mig = current == 1
    attributes["migEnabled"] = {"bool": mig}
    with contextlib.suppress(library.NVMLError):
        bus_id = _text(library.nvmlDeviceGetPciInfo(handle).busId)
        attributes["pciBusID"] = {"string": bus_id}
        root = pcie_root(bus_id)
        if root:
            attributes["resource.kubernetes.io/pcieRoot"] = {"string": root}
    with contextlib.suppress(library.NVMLError, AttributeError):
        attributes["numaNode"] = {"int": int(library.nvmlDeviceGetNumaNodeId(handle))}
    memory = int(library.nvmlDeviceGetMemoryInfo(handle).total)
    device: dict[str, Any] = {
        "name": f"gpu-{index}",
        "attributes": attributes,
        "capacity": {"memory": {"value": str(memory)}},
    }
    sick = _sickness(library, handle)
    if sick:
        device["taints"] = [_unhealthy_taint(sick)]
    return device


def _sickness(library: Any, handle: Any) -> str:
    """Why NVML says the GPU needs attention before it takes new work ("" when it does not):
    a row remapping that failed or waits for a reset (A100 and later), or retired pages that
    wait for one (older GPUs). A query the GPU does not support says nothing."""
    with contextlib.suppress(library.NVMLError, AttributeError, TypeError, ValueError):
        _corrected, _uncorrected, pending, failed = library.nvmlDeviceGetRemappedRows(handle)
        if failed:
            return "row remapping failed"
        if pending:
            return "row remapping pending a reset"
    with contextlib.suppress(library.NVMLError, AttributeError, TypeError, ValueError):
        if int(library.nvmlDeviceGetRetiredPagesPendingStatus(handle)) == 1:
            return "retired pages pending a reset"
    return ""


def _unhealthy_taint(why: str) -> dict[str, Any]:
    return {"key": UNHEALTHY_TAINT_KEY, "value": taint_value(why), "effect": "NoSchedule"}


def _unreadable_gpu(index: int, why: str) -> dict[str, Any]:
    """A GPU NVML cannot read: its index, and a taint that keeps new work off it."""
    return {
        "name": f"gpu-{index}",
        "attributes": {"type": {"string": "gpu"}, "index": {"int": index}},
        "capacity": {"memory": {"value": "0"}},
        "taints": [_unhealthy_taint(f"NVML {why}")],
    }


def _mig_devices(
    library: Any, handle: Any, index: int, parent: dict[str, Any]
) -> list[dict[str, Any]]:
    devices = []
    for slot in range(library.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = library.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except library.NVMLError:
            continue  # an empty slot
        name = _text(library.nvmlDeviceGetName(mig))
        profile = _MIG_PROFILE.search(name)
        attributes = {
            "type": {"string": "mig"},
            "uuid": {"string": _text(library.nvmlDeviceGetUUID(mig))},
            "parentIndex": {"int": index},
            "parentUUID": parent["uuid"],
            "model": parent["model"],
            "productName": parent["productName"],
        }
        if profile:
            attributes["profile"] = {"string": profile.group(1).lower()}
        for key in ("numaNode", "resource.kubernetes.io/pcieRoot", "cudaComputeCapability"):
            if key in parent:
                attributes[key] = parent[key]
        memory = int(library.nvmlDeviceGetMemoryInfo(mig).total)
        devices.append(
            {
                "name": f"gpu-{index}-mig-{slot}",
                "attributes": attributes,
                "capacity": {"memory": {"value": str(memory)}},
            }
        )
    return devices


def _slice(node: str, devices: list[dict[str, Any]]) -> ResourceSlice:
    return ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }
    )


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _semver(version: str) -> str | None:
    """NVIDIA driver versions ("550.54.15", "535.104") as semantic versions."""
    parts = re.findall(r"\d+", version)[:3]
    if not parts:
        return None
    parts += ["0"] * (3 - len(parts))
    return ".".join(str(int(p)) for p in parts)


def pcie_root(bus_id: str, sysfs: Path = Path("/sys/bus/pci/devices")) -> str | None:
    """The PCIe root complex of a device ("pci0000:17"), from sysfs; None when unknown.

    NVML's bus id has an 8-digit domain ("00000000:18:00.0"); sysfs names use 4 digits.
    """
    parts = bus_id.lower().split(":")
    if len(parts) != 3:
        return None
    short = f"{parts[0][-4:]}:{parts[1]}:{parts[2]}"
    try:
        resolved = (sysfs / short).resolve(strict=True)
    except OSError:
        return None
    for part in resolved.parts:
        if part.startswith("pci"):
            return part
    return None


def visible_devices(request: LaunchRequest, published: ResourceSlice | None) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a task: the devices its claims were given, else its GPUs.

    Whole GPUs are named by index; when a MIG device is among them, every device is named by
    UUID (CUDA reads either form, not a mix): a MIG device by its MIG UUID. A task without
    devices or GPUs gets "", which hides every GPU.

    Raises:
        ValueError: a claim device that this machine's slice does not publish.
    """
    if not request.devices:
        return ",".join(str(g) for g in request.gpus)
    by_name: dict[str, dict[str, Any]] = {}
    if published is not None:
        spec = published.spec
        for device in spec.devices:
            data = device.model_dump(mode="json", by_alias=True, exclude_none=True)
            by_name[device.name] = {
                k: next(iter(v.values())) for k, v in data.get("attributes", {}).items()
            }
    chosen = []
    for ref in request.devices:
        if ref.driver != DRIVER:
            continue  # not a GPU: nothing for CUDA to see
        attributes = by_name.get(ref.device)
        if (
            attributes is None
            or published is None
            or ref.pool != published.spec.pool.name
            or "uuid" not in attributes
        ):
            raise ValueError(
                f"device {ref.device} of pool {ref.pool} ({ref.driver}) is not a GPU of this "
                "machine"
            )
        chosen.append(attributes)
    if any(a.get("type") == "mig" for a in chosen):
        return ",".join(str(a["uuid"]) for a in chosen)
    return ",".join(str(a.get("index", a["uuid"])) for a in chosen)
