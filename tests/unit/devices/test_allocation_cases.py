# ruff: noqa: E501  (a table reads better with one case per line)
"""The allocation table: one pod's claims, the devices, what is in use -> exact picks or reasons.

Written from the semantics of Kubernetes DRA (resource.k8s.io/v1): selectors, counts, All mode,
firstAvailable, matchAttribute, distinctAttribute, partitionable devices (MIG counters),
consumable capacity, adminAccess, taints, several claims per pod, unsatisfiable claims.
"""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.api.devices import ResourceClaim, ResourceSlice
from aipaas.devices.allocator import allocate_pod
from aipaas.devices.inventory import Inventory
from aipaas.devices.topology_files import GpuShape, gpu_node_slices
from tests.unit.devices.devices_builders import (
    CLASSES,
    DRIVER,
    allocated,
    claim,
    device_class,
    eight_h100,
    first,
    gpu,
    node_slice,
    req,
)

A = "node-a"
H100 = [node_slice(A, eight_h100())]
MIXED = [
    node_slice(
        A,
        [
            gpu("gpu-0", model="H100"),
            gpu("gpu-1", model="H100"),
            gpu("gpu-2", model="A100", memory="40Gi"),
            gpu("gpu-3", model="A100", memory="40Gi"),
        ],
    )
]
MIG_NODE = gpu_node_slices(
    "mig-0",
    GpuShape(count=1, model="A100", productName="NVIDIA A100-SXM4-80GB", mig="a100-80gb",
             multiprocessors=98),
)  # fmt: skip
SHARED = [
    node_slice(
        A,
        [
            gpu(
                "gpu-0",
                multiple=True,
                capacity={
                    "memory": {
                        "value": "80Gi",
                        "requestPolicy": {
                            "default": "1Gi",
                            "validRange": {"min": "1Gi", "step": "1Gi"},
                        },
                    },
                    "compute": {
                        "value": "100",
                        "requestPolicy": {
                            "default": "10",
                            "validValues": ["10", "25", "50", "100"],
                        },
                    },
                },
            )
        ],
    )
]
RACKS = [node_slice(A, [gpu(f"gpu-{i}", attrs={"rack": {"int": i % 7}}) for i in range(64)])]
TWO_NODES = [
    node_slice("node-a", eight_h100()),
    node_slice("node-b", eight_h100()),
]
TWO_CLASSES_OF_NODES = [
    node_slice("h-0", [gpu(f"gpu-{i}") for i in range(2)]),
    node_slice("h-1", [gpu(f"gpu-{i}") for i in range(2)]),
    node_slice("a-0", [gpu(f"gpu-{i}", model="A100") for i in range(4)]),
]
NV = "gpu.nvidia.com"
MIG_CLASSES = {
    "nvidia-gpu": device_class("nvidia-gpu", f'device.attributes["{NV}"].type == "gpu"'),
    "nvidia-mig": device_class("nvidia-mig", f'device.attributes["{NV}"].type == "mig"'),
}


def mig(name: str, profile: str, count: int | None = None) -> dict[str, Any]:
    return req(
        name, "nvidia-mig", count=count, sel=(f'device.attributes["{NV}"].profile == "{profile}"',)
    )


def held(*devices: str, node: str = A) -> list[ResourceClaim]:
    return [allocated("other", node, *devices)]


def gpus(claim_name: str, request: str, *names: str) -> list[tuple[str, str, str]]:
    return [(claim_name, request, n) for n in names]


ALL8 = [f"gpu-{i}" for i in range(8)]
MODEL = f'device.attributes["{DRIVER}"].model'
MATCH_NVLINK = {"matchAttribute": f"{DRIVER}/nvlinkDomain"}

# (slices, claims, in use, want node, want picks | want reasons)
CASES = [
    # --- selectors and counts ---------------------------------------------------------------
    pytest.param(H100, [claim("c", req("g"))], [], A, gpus("c", "g", "gpu-0"), id="one gpu"),
    pytest.param(
        H100,
        [claim("c", req("g", count=2))],
        [],
        A,
        gpus("c", "g", "gpu-0", "gpu-1"),
        id="two gpus in one domain",
    ),
    pytest.param(
        H100, [claim("c", req("g", count=8))], [], A, gpus("c", "g", *ALL8), id="eight gpus"
    ),
    pytest.param(
        H100,
        [claim("c", req("g", count=9))],
        [],
        None,
        [
            '1 node of class [8x H100] (node-a): claim "c" request "g": needs 9 devices: '
            "8 devices match but only 8 are free"
        ],
        id="more gpus than the node has",
    ),
    pytest.param(
        MIXED,
        [claim("c", req("g", sel=(f'{MODEL} == "A100"',)))],
        [],
        A,
        gpus("c", "g", "gpu-2"),
        id="selector picks a model",
    ),
    pytest.param(
        MIXED,
        [
            claim(
                "c",
                req(
                    "g",
                    count=2,
                    sel=(f'device.capacity["{DRIVER}"].memory.compareTo(quantity("64Gi")) >= 0',),
                ),
            )
        ],
        [],
        A,
        gpus("c", "g", "gpu-0", "gpu-1"),
        id="quantity compareTo selects big memory",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", sel=(f'{MODEL} == "B200"',)))],
        [],
        None,
        [
            '1 node of class [8x H100] (node-a): claim "c" request "g": no device matches '
            f"selector '{MODEL} == \"B200\"'"
        ],
        id="no device matches the selector",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", "tpu"))],
        [],
        None,
        [
            '1 node of class [8x H100] (node-a): claim "c" request "g": no device matches '
            'device class "tpu"'
        ],
        id="no device matches the class",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", "nope"))],
        [],
        None,
        [
            '1 node of class [8x H100] (node-a): claim "c" request "g": device class '
            '"nope" does not exist'
        ],
        id="unknown device class",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", sel=(f'device.attributes["{DRIVER}"].vendor == "x"',)))],
        [],
        None,
        [
            '1 node of class [8x H100] (node-a): claim "c" request "g": selector '
            f"'device.attributes[\"{DRIVER}\"].vendor == \"x\"' failed on device 'gpu-0': "
            "no such key: vendor"
        ],
        id="missing attribute is an error, not false",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", sel=('has(device.attributes["other.example.com"].x)',)))],
        [],
        None,
        [
            '1 node of class [8x H100] (node-a): claim "c" request "g": no device matches '
            "selector 'has(device.attributes[\"other.example.com\"].x)'"
        ],
        id="unknown domain is an empty map",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", count=2))],
        held(*ALL8[:6]),
        A,
        gpus("c", "g", "gpu-6", "gpu-7"),
        id="skips devices in use",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", count=2))],
        held(*ALL8[:7]),
        None,
        [
            '1 node of class [8x H100] (node-a): claim "c" request "g": needs 2 devices: '
            "8 devices match but only 1 is free (7 allocated)"
        ],
        id="not enough free",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", count=3))],
        held("gpu-0", "gpu-1"),
        A,
        gpus("c", "g", "gpu-4", "gpu-5", "gpu-6"),
        id="best fit: the domain that holds all three",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", count=2))],
        held("gpu-0"),
        A,
        gpus("c", "g", "gpu-2", "gpu-3"),
        id="best fit leaves the whole free domain whole, one PCIe root",
    ),
    # --- allocationMode All ---------------------------------------------------------------------
    pytest.param(
        H100,
        [claim("c", req("g", all_=True))],
        [],
        A,
        gpus("c", "g", *ALL8),
        id="All takes every matching device",
    ),
    pytest.param(
        MIXED,
        [claim("c", req("g", all_=True, sel=(f'{MODEL} == "A100"',)))],
        [],
        A,
        gpus("c", "g", "gpu-2", "gpu-3"),
        id="All with a selector",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", all_=True))],
        held("gpu-3"),
        None,
        [
            '1 node of class [8x H100] (node-a): claim "c" request "g": allocationMode All '
            "needs every one of the 8 matching devices, but 1 is not free (1 allocated)"
        ],
        id="All refuses when one is in use",
    ),
    # --- firstAvailable -------------------------------------------------------------------------
    pytest.param(
        H100,
        [claim("c", first("g", req("eight", count=8), req("four", count=4)))],
        [],
        A,
        gpus("c", "g/eight", *ALL8),
        id="firstAvailable takes the first",
    ),
    pytest.param(
        H100,
        [claim("c", first("g", req("eight", count=8), req("four", count=4)))],
        held("gpu-0"),
        A,
        gpus("c", "g/four", "gpu-4", "gpu-5", "gpu-6", "gpu-7"),
        id="firstAvailable falls back to the second",
    ),
    pytest.param(
        H100,
        [claim("c", first("g", req("h200", sel=(f'{MODEL} == "H200"',)), req("nine", count=9)))],
        [],
        None,
        [
            '1 node of class [8x H100] (node-a): claim "c" request "g": no subrequest of '
            'firstAvailable fits: "g/h200": no device matches selector '
            f'\'{MODEL} == "H200"\'; "g/nine": needs 9 devices: 8 devices match but '
            "only 8 are free"
        ],
        id="firstAvailable: none fits",
    ),
    # --- matchAttribute -------------------------------------------------------------------------
    pytest.param(
        H100,
        [claim("c", req("g", count=4), constraints=[MATCH_NVLINK])],
        [],
        A,
        gpus("c", "g", "gpu-0", "gpu-1", "gpu-2", "gpu-3"),
        id="four on one NVLink domain",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", count=4), constraints=[MATCH_NVLINK])],
        held("gpu-1"),
        A,
        gpus("c", "g", "gpu-4", "gpu-5", "gpu-6", "gpu-7"),
        id="four on the other NVLink domain",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", count=4), constraints=[MATCH_NVLINK])],
        held("gpu-1", "gpu-5"),
        None,
        [
            '1 node of class [8x H100] (node-a): claim "c": 6 matching devices are free but '
            f"no NVLink domain has 4 free (matchAttribute {DRIVER}/nvlinkDomain; the most "
            "in one is 3)"
        ],
        id="no NVLink domain has four free",
    ),
    pytest.param(
        H100,
        [claim("c", req("a"), req("b"), constraints=[{"matchAttribute": f"{DRIVER}/numaNode"}])],
        held("gpu-1", "gpu-2", "gpu-3", "gpu-4"),
        A,
        [("c", "a", "gpu-5"), ("c", "b", "gpu-6")],
        id="match across two requests of a claim",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", count=2), constraints=[{"matchAttribute": f"{DRIVER}/rack"}])],
        [],
        None,
        [
            '1 node of class [8x H100] (node-a): claim "c": no free matching device has the '
            f"attribute {DRIVER}/rack"
        ],
        id="match on an attribute nobody has",
    ),
    pytest.param(
        H100,
        [
            claim("x", req("g", count=4), constraints=[MATCH_NVLINK]),
            claim("y", req("g", count=4), constraints=[MATCH_NVLINK]),
        ],
        [],
        A,
        gpus("x", "g", *ALL8[:4]) + gpus("y", "g", *ALL8[4:]),
        id="two claims, each on its own domain",
    ),
    pytest.param(
        H100,
        [
            claim(
                "c",
                req("g", count=2),
                constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
            )
        ],
        held("gpu-0", "gpu-3"),
        A,
        gpus("c", "g", "gpu-4", "gpu-5"),
        id="match on the standard pcieRoot attribute",
    ),
    # --- distinctAttribute ----------------------------------------------------------------------
    pytest.param(
        H100,
        [
            claim(
                "c",
                req("g", count=2),
                constraints=[{"distinctAttribute": "resource.kubernetes.io/pcieRoot"}],
            )
        ],
        [],
        A,
        gpus("c", "g", "gpu-0", "gpu-2"),
        id="distinct PCIe roots",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", count=2), constraints=[{"distinctAttribute": f"{DRIVER}/numaNode"}])],
        [],
        A,
        gpus("c", "g", "gpu-0", "gpu-4"),
        id="distinct NUMA nodes",
    ),
    pytest.param(
        H100,
        [claim("c", req("g", count=3), constraints=[{"distinctAttribute": f"{DRIVER}/numaNode"}])],
        [],
        None,
        [
            '1 node of class [8x H100] (node-a): claim "c": needs 3 devices with distinct values of '
            f"{DRIVER}/numaNode, but the free matching devices have only 2"
        ],
        id="not enough distinct NUMA nodes",
    ),
    pytest.param(
        RACKS,
        [
            claim(
                "c",
                *[req(f"r{i}") for i in range(8)],
                constraints=[{"distinctAttribute": f"{DRIVER}/rack"}],
            )
        ],
        [],
        None,
        [
            '1 node of class [64x H100] (node-a): claim "c": needs 8 devices with distinct '
            f"values of {DRIVER}/rack, but the free matching devices have only 7"
        ],
        id="distinct across eight requests, seven racks: refused without a long search",
    ),
    pytest.param(
        RACKS,
        [claim("c", req("g", count=7), constraints=[{"distinctAttribute": f"{DRIVER}/rack"}])],
        [],
        A,
        gpus("c", "g", *[f"gpu-{i}" for i in range(7)]),
        id="one device per rack",
    ),
    # --- partitionable devices: MIG counters ----------------------------------------------------
    pytest.param(
        MIG_NODE,
        [claim("c", mig("m", "1g.10gb"))],
        [],
        "mig-0",
        gpus("c", "m", "gpu-0-mig-1g-10gb-0"),
        id="one 1g.10gb",
    ),
    pytest.param(
        MIG_NODE,
        [claim("c", mig("m", "3g.40gb", 2))],
        [],
        "mig-0",
        gpus("c", "m", "gpu-0-mig-3g-40gb-0", "gpu-0-mig-3g-40gb-4"),
        id="two 3g.40gb fill the GPU",
    ),
    pytest.param(
        MIG_NODE,
        [claim("c", mig("m", "4g.40gb"), mig("n", "3g.40gb"))],
        [],
        "mig-0",
        gpus("c", "m", "gpu-0-mig-4g-40gb-0") + gpus("c", "n", "gpu-0-mig-3g-40gb-4"),
        id="4g.40gb beside 3g.40gb",
    ),
    pytest.param(
        MIG_NODE,
        [claim("c", mig("m", "4g.40gb"), mig("n", "4g.40gb"))],
        [],
        None,
        [
            "1 node of class [1x A100] (mig-0): the requests cannot be satisfied together: "
            "they compete for the same free devices or shared counters"
        ],
        id="two 4g.40gb do not fit",
    ),
    pytest.param(
        MIG_NODE,
        [claim("c", mig("m", "1g.10gb", 7))],
        [],
        "mig-0",
        gpus("c", "m", *[f"gpu-0-mig-1g-10gb-{i}" for i in range(7)]),
        id="seven 1g.10gb",
    ),
    pytest.param(
        MIG_NODE,
        [claim("c", mig("m", "1g.10gb", 8))],
        [],
        None,
        [
            '1 node of class [1x A100] (mig-0): claim "c" request "m": needs 8 devices: '
            "7 devices match but only 7 are free"
        ],
        id="eight 1g.10gb do not exist",
    ),
    pytest.param(
        MIG_NODE,
        [claim("c", mig("m", "2g.20gb", 3), mig("n", "1g.10gb"))],
        [],
        "mig-0",
        gpus("c", "m", "gpu-0-mig-2g-20gb-0", "gpu-0-mig-2g-20gb-2", "gpu-0-mig-2g-20gb-4")
        + gpus("c", "n", "gpu-0-mig-1g-10gb-6"),
        id="three 2g.20gb and a 1g.10gb",
    ),
    pytest.param(
        MIG_NODE,
        [claim("c", mig("m", "1g.10gb"))],
        [allocated("whole", "mig-0", "gpu-0", driver=NV)],
        None,
        [
            '1 node of class [1x A100] (mig-0): claim "c" request "m": needs 1 device: '
            "7 devices match but only 0 are free (7 blocked by shared counters in use (a "
            "partitionable device is used whole or as partitions, never both))"
        ],
        id="no slice of a GPU used whole",
    ),
    pytest.param(
        MIG_NODE,
        [claim("c", req("g", "nvidia-gpu"))],
        [allocated("slice", "mig-0", "gpu-0-mig-1g-10gb-3", driver=NV)],
        None,
        [
            '1 node of class [1x A100] (mig-0): claim "c" request "g": needs 1 device: '
            "1 device matches but only 0 are free (1 blocked by shared counters in use (a "
            "partitionable device is used whole or as partitions, never both))"
        ],
        id="no whole GPU once sliced",
    ),
    pytest.param(
        MIG_NODE,
        [claim("c", mig("m", "3g.40gb"))],
        [allocated("slice", "mig-0", "gpu-0-mig-1g-10gb-1", driver=NV)],
        "mig-0",
        gpus("c", "m", "gpu-0-mig-3g-40gb-4"),
        id="slice beside a used slice",
    ),
    # --- consumable capacity --------------------------------------------------------------------
    pytest.param(
        SHARED,
        [
            claim("x", req("g", capacity={"memory": "30Gi"})),
            claim("y", req("g", capacity={"memory": "30Gi", "compute": "50"})),
        ],
        [],
        A,
        [
            ("x", "g", "gpu-0", {"memory": "30Gi", "compute": "10"}),
            ("y", "g", "gpu-0", {"memory": "30Gi", "compute": "50"}),
        ],
        id="two claims share one GPU",
    ),
    pytest.param(
        SHARED,
        [claim("c", req("g", capacity={"memory": "20.5Gi", "compute": "20"}))],
        [],
        A,
        [("c", "g", "gpu-0", {"memory": "21Gi", "compute": "25"})],
        id="requests round up to the policy",
    ),
    pytest.param(
        SHARED,
        [claim("c", req("g", capacity={"memory": "30Gi"}))],
        [allocated("other", A, "gpu-0", consumed={"memory": "60Gi", "compute": "10"})],
        None,
        [
            '1 node of class [1x H100] (node-a): claim "c" request "g": needs 1 device: '
            "1 device matches but only 0 are free (1 without enough capacity left)"
        ],
        id="not enough memory left",
    ),
    pytest.param(
        SHARED,
        [claim("c", req("g", capacity={"memory": "100Gi"}))],
        [],
        None,
        [
            '1 node of class [1x H100] (node-a): claim "c" request "g": no matching device '
            "has the capacity requested (memory: 100Gi)"
        ],
        id="more than the GPU has",
    ),
    pytest.param(
        MIXED,
        [claim("c", req("g", capacity={"memory": "64Gi"}))],
        [],
        A,
        gpus("c", "g", "gpu-0"),
        id="capacity as a minimum on an exclusive device",
    ),
    # --- adminAccess ------------------------------------------------------------------------------
    pytest.param(
        H100,
        [claim("mon", req("g", all_=True, admin=True))],
        held(*ALL8),
        A,
        gpus("mon", "g", *ALL8),
        id="adminAccess sees devices in use",
    ),
    pytest.param(
        H100,
        [claim("mon", req("m", admin=True)), claim("w", req("g"))],
        [],
        A,
        gpus("mon", "m", "gpu-0") + gpus("w", "g", "gpu-0"),
        id="adminAccess holds nothing",
    ),
    # --- taints ---------------------------------------------------------------------------------
    pytest.param(
        [
            node_slice(
                A, [gpu("gpu-0", taints=[{"key": "broken", "effect": "NoSchedule"}]), gpu("gpu-1")]
            )
        ],
        [claim("c", req("g", count=2))],
        [],
        None,
        [
            '1 node of class [2x H100] (node-a): claim "c" request "g": needs 2 devices: '
            "1 device matches but only 1 is free"
        ],
        id="tainted device is not a candidate",
    ),
    pytest.param(
        [node_slice(A, [gpu("gpu-0", taints=[{"key": "broken", "effect": "NoSchedule"}])])],
        [claim("c", req("g", tolerations=[{"key": "broken", "operator": "Exists"}]))],
        [],
        A,
        gpus("c", "g", "gpu-0"),
        id="toleration admits a tainted device",
    ),
    # --- several claims, several nodes ---------------------------------------------------------
    pytest.param(
        H100,
        [claim("x", req("g", count=6)), claim("y", req("g", count=4))],
        [],
        None,
        [
            "1 node of class [8x H100] (node-a): the requests cannot be satisfied together: "
            "they compete for the same free devices or shared counters"
        ],
        id="two claims that do not fit together",
    ),
    pytest.param(
        TWO_NODES,
        [claim("c", req("g", count=4), constraints=[MATCH_NVLINK])],
        held("gpu-0", "gpu-4"),
        "node-b",
        gpus("c", "g", *ALL8[:4]),
        id="second node when the first has no whole domain",
    ),
    pytest.param(
        TWO_CLASSES_OF_NODES,
        [claim("c", req("g", count=3))],
        [],
        "a-0",
        gpus("c", "g", "gpu-0", "gpu-1", "gpu-2"),
        id="the node class that is big enough",
    ),
    pytest.param(
        TWO_CLASSES_OF_NODES,
        [claim("c", req("g", count=3, sel=(f'{MODEL} == "H100"',)))],
        [],
        None,
        [
            '2 nodes of class [2x H100] (e.g. h-0): claim "c" request "g": needs 3 devices: '
            "2 devices match but only 2 are free",
            '1 node of class [4x A100] (a-0): claim "c" request "g": no device matches '
            f"selector '{MODEL} == \"H100\"'",
        ],
        id="reasons per node class",
    ),
]


@pytest.mark.parametrize(("slices", "claims", "in_use", "want_node", "want"), CASES)
def test_allocation(
    slices: list[ResourceSlice],
    claims: list[ResourceClaim],
    in_use: list[ResourceClaim],
    want_node: str | None,
    want: list[Any],
) -> None:
    inventory = Inventory(slices)
    inventory.check_counters()
    classes = {**CLASSES, **MIG_CLASSES}
    result = allocate_pod(claims, inventory, classes, inventory.in_use(in_use))
    if want_node is None:
        assert not result.fits
        assert list(result.reasons) == want
        return
    assert result.allocation is not None, result.reasons
    assert result.allocation.node == want_node
    got: list[tuple[Any, ...]] = []
    for pick in result.allocation.picks:
        result_row = pick.result()
        if result_row.consumed_capacity:
            got.append((pick.claim, pick.request, pick.device.name, result_row.consumed_capacity))
        else:
            got.append((pick.claim, pick.request, pick.device.name))
    assert got == [tuple(w) for w in want]


def test_table_is_big_enough() -> None:
    assert len(CASES) >= 40
