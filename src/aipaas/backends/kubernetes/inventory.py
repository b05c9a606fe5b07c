"""A cluster's inventory from its Nodes, Pods, ResourceSlices and ResourceClaims (pure).

What aipaas may place on a node is its allocatable CPU and memory less what the pods that are
not its tasks request there (other schedulers share the cluster). The ResourceSlices are
published whole; what claims allocated by others hold is handed over as those allocations
(``Inventory.held_elsewhere``), which the device ledger holds as it holds aipaas's own: their
devices, shares and counters are taken for ordinary requests, and an adminAccess request may
still select them, as kube-scheduler's DRA plugin allows. (A claim whose allocation cannot be
read has its devices left out of their slices, and its counters taken off its pools' shared
counters, instead.) The node's labels are its topology
(``topology.kubernetes.io/zone``, a rack label...), as the scheduler reads them.
A node that is not Ready, or is cordoned, is reported as ``unknown``: nothing new goes there and
its tasks are not given up.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Set
from dataclasses import replace
from decimal import Decimal
from typing import Any

from pydantic import ValidationError

from aipaas.api.devices import ResourceClaim, ResourceSlice
from aipaas.api.quantity import format_quantity, parse_quantity
from aipaas.backends.base import Inventory, NodeInfo
from aipaas.devices.binding import DeviceKey
from aipaas.devices.gpu_health import gpu_annotations, slice_gpus
from aipaas.devices.topology_files import DRIVER

log = logging.getLogger("aipaas.backends.kubernetes")

BACKEND = "kubernetes"
GPU_RESOURCE = "nvidia.com/gpu"
_ENDED = ("Succeeded", "Failed")


def _milli(text: object) -> int:
    return int(parse_quantity(str(text)) * 1000) if text not in (None, "") else 0


def _mib(text: object) -> int:
    return int(parse_quantity(str(text)) / (1 << 20)) if text not in (None, "") else 0


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = [c for c in conditions if c.get("type") == "Ready"]
    # a node without conditions (a test cluster's bare Node) counts as ready
    return not ready or ready[-1].get("status") == "True"


def _others_requests(pods: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """CPU milli and memory MiB that the pods (not aipaas's tasks) request, per node."""
    used: dict[str, tuple[int, int]] = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node:
            continue
        if (pod.get("status") or {}).get("phase") in _ENDED:
            continue
        cpu, mem = used.get(node, (0, 0))
        for container in spec.get("containers") or []:
            requests = (container.get("resources") or {}).get("requests") or {}
            cpu += _milli(requests.get("cpu"))
            mem += _mib(requests.get("memory"))
        used[node] = (cpu, mem)
    return used


def held_by_others(
    claims: Iterable[Mapping[str, Any]], tasks: Set[str]
) -> tuple[list[ResourceClaim], set[tuple[str, str, str]]]:
    """The claims allocated for anything but aipaas's task pods (``tasks``: their uids), as
    allocated claims for the device ledger; and (driver, pool, device) of the devices of those
    whose allocation cannot be read. A claim reserved for aipaas's tasks alone is aipaas's own
    allocation, which it counts itself."""
    found: list[ResourceClaim] = []
    unread: set[tuple[str, str, str]] = set()
    for claim in claims:
        status = claim.get("status") or {}
        users = {r.get("uid") for r in status.get("reservedFor") or []}
        if users and users <= tasks:
            continue
        allocation = status.get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        if not results:
            continue
        meta = claim.get("metadata") or {}
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
            "spec": {},  # the ledger reads only what the allocation holds
            "status": {"allocation": allocation},
        }
        try:
            found.append(ResourceClaim.model_validate(body))
        except ValidationError as err:
            log.warning(
                "ResourceClaim %s: its allocation is not readable: %s", meta.get("name"), err
            )
            for result in results:
                unread.add(
                    (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
                )
    return found, unread


def node_info(node: Mapping[str, Any], used: tuple[int, int]) -> NodeInfo:
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    meta = node.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    return NodeInfo(
        name=meta["name"],
        backend=BACKEND,
        cpu_milli=max(_milli(allocatable.get("cpu")) - used[0], 0),
        memory_mib=max(_mib(allocatable.get("memory")) - used[1], 0),
        gpu_count=int(parse_quantity(str(allocatable.get(GPU_RESOURCE, 0)))),
        gpu_model=labels.get("nvidia.com/gpu.product", ""),
        labels=labels,
    )


#: (driver, pool, counter set) -> counter -> how much of it devices held by others consume
HeldCounters = dict[tuple[str, str, str], dict[str, Decimal]]


def held_counters(
    slices: Iterable[Mapping[str, Any]], held: set[tuple[str, str, str]]
) -> HeldCounters:
    """What the devices ``held`` consume of their pools' shared counters (partitionable
    devices, KEP-4815): devices others hold whose allocation cannot be read are left out of
    their slices, and their counters would otherwise look free (kube-scheduler's partitions
    of a GPU would leave aipaas room for partitions the GPU no longer has)."""
    used: HeldCounters = {}
    for document in slices:
        spec = document.get("spec") or {}
        driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        for device in spec.get("devices") or []:
            if (driver, pool, device.get("name", "")) not in held:
                continue
            for consumption in device.get("consumesCounters") or []:
                counters = used.setdefault((driver, pool, consumption.get("counterSet", "")), {})
                for name, counter in (consumption.get("counters") or {}).items():
                    amount = parse_quantity(str((counter or {}).get("value", 0)))
                    counters[name] = counters.get(name, Decimal(0)) + amount
    return used


def _left(
    counter_set: Mapping[str, Any], driver: str, pool: str, used: HeldCounters
) -> dict[str, Any]:
    """A shared counter set less what held devices consume of it (never below 0)."""
    taken = used.get((driver, pool, counter_set.get("name", "")))
    if not taken:
        return dict(counter_set)
    counters = {}
    for name, counter in (counter_set.get("counters") or {}).items():
        value = parse_quantity(str((counter or {}).get("value", 0)))
        left = max(value - taken.get(name, Decimal(0)), Decimal(0))
        counters[name] = {**counter, "value": format_quantity(left)}
    return {**counter_set, "counters": counters}


def _version_key(document: Mapping[str, Any]) -> tuple[str, str]:
    meta = document.get("metadata") or {}
    return (str(meta.get("name") or ""), str(meta.get("resourceVersion") or ""))


def _slice_read(
    document: Mapping[str, Any],
    held: set[tuple[str, str, str]],
    used: HeldCounters,
    touched: Set[tuple[str, str]],
    parsed: dict[tuple[str, str], ResourceSlice | None] | None,
) -> ResourceSlice | None:
    """``_slice``, or the object read before when nothing of the slice's pool is held by
    others (then it depends on the document alone) and its version is the same."""
    spec = document.get("spec") or {}
    pool = (str(spec.get("driver", "")), str((spec.get("pool") or {}).get("name", "")))
    key = _version_key(document)
    if parsed is None or pool in touched or not key[1]:
        return _slice(document, held, used)
    if key not in parsed:
        parsed[key] = _slice(document, held, used)
    return parsed[key]


def _slice(
    document: Mapping[str, Any],
    held: set[tuple[str, str, str]],
    used: HeldCounters | None = None,
) -> ResourceSlice | None:
    spec = dict(document.get("spec") or {})
    driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
    spec["devices"] = [
        d for d in spec.get("devices") or [] if (driver, pool, d.get("name", "")) not in held
    ]
    if used and spec.get("sharedCounters"):
        spec["sharedCounters"] = [_left(c, driver, pool, used) for c in spec["sharedCounters"]]
    meta = document.get("metadata") or {}
    body = {"apiVersion": document.get("apiVersion"), "kind": "ResourceSlice", "spec": spec}
    body["metadata"] = {"name": meta.get("name"), "labels": meta.get("labels") or {}}
    try:
        return ResourceSlice.model_validate(body)
    except ValidationError as err:
        log.warning("ResourceSlice %s is not usable here: %s", meta.get("name"), err)
        return None


def inventory(
    nodes: list[dict[str, Any]],
    others: list[dict[str, Any]],
    slices: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    tasks: Set[str],
    parsed: dict[tuple[str, str], ResourceSlice | None] | None = None,
) -> Inventory:
    """``others``: the pods that are not aipaas's tasks; ``tasks``: the uids of those that are.
    ``parsed``: the slices read before, by (name, resourceVersion), kept by the caller and
    brought up to date here (a slice of a pool of which nothing is held by others is the same
    object while its version is: hundreds of slices are not validated again each read)."""
    used = _others_requests(others)
    infos = tuple(node_info(n, used.get(n["metadata"]["name"], (0, 0))) for n in nodes)
    unknown = frozenset(
        n["metadata"]["name"]
        for n in nodes
        if not _ready(n) or (n.get("spec") or {}).get("unschedulable")
    )
    names = {n.name for n in infos}
    elsewhere, held = held_by_others(claims, tasks)
    consumed = held_counters(slices, held)
    touched = {(driver, pool) for driver, pool, _ in held}
    read = [_slice_read(d, held, consumed, touched, parsed) for d in slices]
    if parsed is not None:  # only what is published now stays
        current = {_version_key(d) for d in slices}
        for gone in [k for k in parsed if k not in current]:
            del parsed[gone]
    kept = [
        s for s in read if s is not None and (s.spec.node_name is None or s.spec.node_name in names)
    ]
    on_node: dict[str | None, list[ResourceSlice]] = {}
    for published in kept:  # each node's own slices: not every slice for every node
        on_node.setdefault(published.spec.node_name, []).append(published)
    taken = {
        (r.driver, r.pool, r.device)
        for c in elsewhere
        if c.status is not None and c.status.allocation is not None
        for r in c.status.allocation.devices.results
    }
    infos = tuple(_with_dra_gpus(n, on_node.get(n.name, []), taken) for n in infos)
    features = frozenset({"containers"} | ({"gpu"} if any(n.gpu_count for n in infos) else set()))
    return Inventory(
        infos,
        features,
        tuple(kept),
        unknown,
        device_conditions=_conditions(claims),
        held_elsewhere=tuple(elsewhere),
    )


def _conditions(claims: Iterable[Mapping[str, Any]]) -> dict[DeviceKey, tuple[dict[str, Any], ...]]:
    """The conditions drivers set in the claims' status.devices, per device (the binding
    conditions a task waits for: devices/binding.py)."""
    found: dict[DeviceKey, tuple[dict[str, Any], ...]] = {}
    for claim in claims:
        for entry in (claim.get("status") or {}).get("devices") or []:
            conditions = entry.get("conditions") or []
            if conditions:
                key = (str(entry.get("driver")), str(entry.get("pool")), str(entry.get("device")))
                found[key] = tuple(dict(c) for c in conditions)
    return found


def _with_dra_gpus(
    node: NodeInfo, slices: list[ResourceSlice], taken: Set[tuple[str, str, str]] = frozenset()
) -> NodeInfo:
    """A node whose GPUs a DRA driver publishes (and no device plugin counts): its GPU count,
    model and memory from the slices' GPU devices, as the scheduler counts GPUs, and their
    UUIDs and health (a device tainted NoSchedule or NoExecute takes nothing new) in the
    node's annotations (devices/gpu_health.py). ``slices``: the node's own (any other is
    left out, but a caller with hundreds of nodes passes each only its own). ``taken``: the
    devices others' claims hold, not counted (the node's GPUs are what aipaas may use)."""
    facts = slice_gpus(slices, node.name, DRIVER)
    if facts and not node.gpu_count:
        node = replace(node, annotations={**node.annotations, **gpu_annotations(facts)})
    gpus = [
        d
        for s in slices
        if s.spec.node_name == node.name and s.spec.driver == DRIVER
        for d in s.spec.devices
        if (d.attributes.get("type") and d.attributes["type"].string == "gpu")
        and (s.spec.driver, s.spec.pool.name, d.name) not in taken
    ]
    if node.gpu_count or not gpus:
        return node
    memory = gpus[0].capacity.get("memory")
    product = gpus[0].attributes.get("productName")
    return replace(
        node,
        gpu_count=len(gpus),
        gpu_model=node.gpu_model or (product.string or "" if product else ""),
        gpu_memory_mib=_mib(memory.value) if memory else 0,
    )
