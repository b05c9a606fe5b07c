"""Enforcement on the device of a GPU share (``gpu: {count, memory|memoryPercent, cores}``).

Who calls it: the controller when it starts a task (controller/task_devices.py
``share_enforcement``), with the task's ``GpuRequest`` and the labels and annotations its node
carries. Pure: no I/O.

The scheduler fits a share's memory and cores per GPU (scheduler/framework/gpu_share.py); this
module decides what, on the node, holds the task to that share, in order of what the node has:

1. **NVIDIA MPS** (the node is labelled ``aipaas.dev/gpu-share-enforcement: mps``, which the
   local backend sets when its operator enables MPS): ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` is
   the share's cores (a percent of each device's threads) and
   ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` gives each visible device its memory, as
   ``<ordinal>=<MiB>M`` pairs. Ordinals are the task's own (0, 1, ... in the order of its
   ``CUDA_VISIBLE_DEVICES``), as an MPS client numbers its devices.
2. **HAMi-core** (label value ``hami-core``; the library's path in the node annotation
   ``aipaas.dev/hami-core-library``, HAMi's default path when absent): ``LD_PRELOAD`` loads the
   library before the task's own preloads, ``CUDA_DEVICE_MEMORY_LIMIT_<ordinal>`` is each
   visible device's memory (``<MiB>m``), ``CUDA_DEVICE_SM_LIMIT`` the cores, and
   ``CUDA_DEVICE_MEMORY_SHARED_CACHE`` a file of this attempt's own (HAMi-core keeps its books
   there; a file shared by tasks of other limits would mix them).
3. Otherwise nothing is set and the result says the share is **not enforced**.

A limit the share does not ask for is not set (a share without ``cores`` promises no compute,
so none is limited), and the note says so: it never claims a limit that is not there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from aipaas.api.quantity import parse_quantity
from aipaas.api.resources import GpuRequest

__all__ = [
    "DEFAULT_HAMI_CORE_LIBRARY",
    "ENFORCEMENT_LABEL",
    "HAMI_CORE",
    "HAMI_CORE_LIBRARY_ANNOTATION",
    "MPS",
    "Enforcement",
    "ShareLimits",
    "enforce",
    "node_mechanism",
    "share_enforcement_labels",
    "share_limits",
]

ENFORCEMENT_LABEL: Final = "aipaas.dev/gpu-share-enforcement"
HAMI_CORE_LIBRARY_ANNOTATION: Final = "aipaas.dev/hami-core-library"
#: where HAMi's device plugin puts the library on a node
DEFAULT_HAMI_CORE_LIBRARY: Final = "/usr/local/vgpu/libvgpu.so"
MPS: Final = "mps"
HAMI_CORE: Final = "hami-core"
#: an attempt's HAMi-core books: a file of its own in /tmp (where HAMi-core keeps its default
#: one), directly there so that no directory has to exist first
HAMI_CORE_CACHE_PREFIX: Final = "/tmp/aipaas-vgpu-"


@dataclass(frozen=True)
class ShareLimits:
    """What a share takes of each of its GPUs. ``memory_mib`` None: not known (a percent of a
    GPU whose memory the node does not report); ``cores`` None: the share asked no compute."""

    gpus: int
    memory_mib: int | None
    cores: int | None


@dataclass(frozen=True)
class Enforcement:
    """The variables a task starts with, and what its status says about them."""

    enforced: bool
    note: str
    env: Mapping[str, str] = field(default_factory=dict)


def share_limits(gpu: GpuRequest, gpu_memory_mib: int) -> ShareLimits:
    """The per-GPU limits of a share (``gpu.is_share``) on GPUs of ``gpu_memory_mib`` each
    (0: unknown). Neither ``memory`` nor ``memoryPercent``: all of the GPU's memory, as the
    scheduler fits it; a fraction with a memory takes that fraction of the compute."""
    cores = gpu.cores
    if cores is None and gpu.fraction is not None and gpu.fraction < 1:
        cores = max(1, round(gpu.fraction * 100))
    memory: int | None
    if gpu.memory is not None:
        memory = int(parse_quantity(gpu.memory) // 2**20)
    else:
        percent = gpu.memory_percent or 100
        memory = gpu_memory_mib * percent // 100 if gpu_memory_mib > 0 else None
    return ShareLimits(gpus=gpu.count, memory_mib=memory, cores=cores)


def share_enforcement_labels(mps: bool, hami_core_library: str | None) -> dict[str, str]:
    """The label a backend puts on a node whose operator set up MPS (first) or HAMi-core."""
    if mps:
        return {ENFORCEMENT_LABEL: MPS}
    if hami_core_library:
        return {ENFORCEMENT_LABEL: HAMI_CORE}
    return {}


def node_mechanism(
    labels: Mapping[str, str], annotations: Mapping[str, str]
) -> tuple[str | None, str]:
    """What the node enforces shares with (``mps``, ``hami-core`` or None) and, for HAMi-core,
    the library's path ("" otherwise). A label value other than the two counts as none."""
    mechanism = labels.get(ENFORCEMENT_LABEL, "").strip().lower()
    if mechanism == MPS:
        return MPS, ""
    if mechanism == HAMI_CORE:
        library = annotations.get(HAMI_CORE_LIBRARY_ANNOTATION, "").strip()
        return HAMI_CORE, library or DEFAULT_HAMI_CORE_LIBRARY
    return None, ""


def enforce(
    limits: ShareLimits,
    mechanism: str | None,
    *,
    node: str,
    library: str = "",
    attempt_key: str = "",
    preload: str = "",
) -> Enforcement:
    """The variables that hold a task to ``limits`` on a node with ``mechanism``.

    Args:
        node: the node's name (for the note).
        library: HAMi-core's library path (``node_mechanism``).
        attempt_key: names the attempt's HAMi-core cache file (unique per attempt).
        preload: the task's own ``LD_PRELOAD``; HAMi-core's library goes before it.
    """
    what = _what(limits)
    if mechanism is None:
        return Enforcement(
            False,
            f"not enforced: node {node} has neither MPS nor HAMi-core, so {what} is a "
            "scheduling promise only",
        )
    ordinals = range(limits.gpus)
    env: dict[str, str] = {}
    limited: list[str] = []
    if mechanism == MPS:
        if limits.cores is not None:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(limits.cores)
            limited.append(f"{limits.cores}% of the threads")
        if limits.memory_mib is not None:
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(
                f"{i}={limits.memory_mib}M" for i in ordinals
            )
            limited.append(f"{limits.memory_mib}Mi")
        name = "MPS"
    else:
        env["LD_PRELOAD"] = f"{library} {preload}".strip()
        if limits.memory_mib is not None:
            env.update({f"CUDA_DEVICE_MEMORY_LIMIT_{i}": f"{limits.memory_mib}m" for i in ordinals})
            limited.append(f"{limits.memory_mib}Mi")
        if limits.cores is not None:
            env["CUDA_DEVICE_SM_LIMIT"] = str(limits.cores)
            limited.append(f"{limits.cores}% of the SMs")
        cache = (attempt_key or "task").replace("/", "_")
        env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{HAMI_CORE_CACHE_PREFIX}{cache}.cache"
        name = "HAMi-core"
    gpus = f"each of its {limits.gpus} GPUs" if limits.gpus != 1 else "its GPU"
    if not limited:
        return Enforcement(
            False, f"not enforced: {name} on node {node} has no limit to set for {what}"
        )
    missing = _missing(limits)
    note = f"enforced by {name} on node {node}: {' and '.join(limited)} of {gpus}"
    return Enforcement(True, note + (f"; {missing}" if missing else ""), env)


def _what(limits: ShareLimits) -> str:
    parts = []
    if limits.memory_mib is not None:
        parts.append(f"{limits.memory_mib}Mi")
    if limits.cores is not None:
        parts.append(f"{limits.cores}% of the compute")
    asked = " and ".join(parts) or "the share"
    gpus = f"each of {limits.gpus} GPUs" if limits.gpus != 1 else "its GPU"
    return f"{asked} of {gpus}"


def _missing(limits: ShareLimits) -> str:
    if limits.cores is None and limits.memory_mib is None:
        return "neither memory nor compute is limited"
    if limits.cores is None:
        return "compute is not limited (the share asks for no cores)"
    if limits.memory_mib is None:
        return "memory is not limited (the GPU's memory is not known)"
    return ""
