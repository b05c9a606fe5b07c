# ruff: noqa: E501  (a table reads better with one case per line)
"""The allocator against cases shaped after Kubernetes' structured allocator table (TestAllocator
in k8s.io/dynamic-resource-allocation/structured): pools (generation, resourceSliceCount,
duplicate devices), firstAvailable with constraints on one subrequest, consumable capacity
(shares of one device, allocationMode All with capacity, matchAttribute over shares) and device
taints (effects None, NoSchedule, NoExecute; DeviceTaintRules).

Each case names the upstream case it follows; every expected answer was worked out by hand
from the semantics written in docs/devices.md, not by running the allocator.
"""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.api.devices import (
    DeviceTaintRule,
    ResourceClaim,
    ResourceSlice,
    load_device_documents,
)
from aipaas.devices.allocator import allocate_pod
from aipaas.devices.inventory import Inventory
from aipaas.errors import InvalidObject
from tests.unit.devices.devices_builders import (
    CLASSES,
    DRIVER,
    allocated,
    claim,
    first,
    gpu,
    node_slice,
    req,
)

A = "node-a"
B = "node-b"
NUMA = {"matchAttribute": f"{DRIVER}/numaNode"}
MODEL = {"matchAttribute": f"{DRIVER}/model"}
NO_DEVICE = ["no node publishes any device"]


def pool_slice(
    name: str,
    pool: str,
    devices: list[dict[str, Any]],
    *,
    node: str = A,
    generation: int = 0,
    count: int = 1,
) -> ResourceSlice:
    """A slice of ``pool`` (on ``node``) at a generation, one of ``count`` slices of the pool."""
    return ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
                "devices": devices,
            },
        }
    )


def shareable(name: str, memory: str = "40Gi", numa: int | None = None) -> dict[str, Any]:
    """A device that allows multiple allocations; a share takes 10Gi unless it asks more."""
    policy = {"default": "10Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}
    return gpu(
        name,
        numa=numa,
        multiple=True,
        capacity={"memory": {"value": memory, "requestPolicy": policy}},
    )


def taint_rule(effect: str, selector: dict[str, str] | None) -> DeviceTaintRule:
    spec: dict[str, Any] = {"taint": {"key": "maintenance", "effect": effect}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return DeviceTaintRule.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1beta2",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "rule"},
            "spec": spec,
        }
    )


def share_of(name: str, used: str) -> list[ResourceClaim]:
    """Another claim already holds ``used`` of the memory of device ``name``."""
    return [allocated(f"other-{name}", A, name, consumed={"memory": used})]


TWO_PLAIN = [node_slice(A, [gpu("gpu-0"), gpu("gpu-1")])]
NUMA_0_1 = [node_slice(A, [gpu("gpu-0", numa=0), gpu("gpu-1", numa=1)])]
NUMA_0_1_1 = [node_slice(A, [gpu("gpu-0", numa=0), gpu("gpu-1", numa=1), gpu("gpu-2", numa=1)])]
ONE_SHAREABLE = [node_slice(A, [shareable("gpu-0", numa=0)])]
TWO_SHAREABLE = [node_slice(A, [shareable("gpu-0", numa=0), shareable("gpu-1", numa=1)])]
NONE_TAINT = {"key": "ecc", "value": "corrected", "effect": "None"}
NO_SCHEDULE = {"key": "ecc", "effect": "NoSchedule"}
NO_EXECUTE = {"key": "ecc", "effect": "NoExecute"}

# (upstream case, slices, taint rules, claims, in use, want node, want picks | want reasons)
CASES = [
    # --- pools: generation, resourceSliceCount, duplicates -------------------------------------
    pytest.param(
        "TestAllocator/obsolete-slice",
        [pool_slice("old", "p", [gpu("gpu-0")]), pool_slice("new", "p", [gpu("gpu-1")], generation=1)],
        [], [claim("c", req("g"))], [],
        A, [("c", "g", "gpu-1")],
        id="only the newest generation of a pool is allocated",
    ),
    pytest.param(
        "TestAllocator/obsolete-slice (newest generation incomplete)",
        [pool_slice("old", "p", [gpu("gpu-0")]), pool_slice("new", "p", [gpu("gpu-1")], generation=1, count=2)],
        [], [claim("c", req("g"))], [],
        None, [*NO_DEVICE, f"pool p of {DRIVER} is set aside: incomplete: 1 of 2 ResourceSlices of the pool are published"],
        id="an obsolete complete generation does not stand in for an incomplete newer one",
    ),
    pytest.param(
        "TestAllocator/duplicate-slice",
        [
            pool_slice("p-1", "p", [gpu("gpu-0")], count=2),
            pool_slice("p-2", "p", [gpu("gpu-0")], count=2),
            pool_slice("q", "q", [gpu("gpu-9")]),
        ],
        [], [claim("c", req("g"))], [],
        A, [("c", "g", "gpu-9")],
        id="a duplicate device sets its pool aside, the other pool still serves",
    ),
    pytest.param(
        "TestAllocator/duplicate-slice",
        [pool_slice("p-1", "p", [gpu("gpu-0")], count=2), pool_slice("p-2", "p", [gpu("gpu-0")], count=2)],
        [], [claim("c", req("g"))], [],
        None, [*NO_DEVICE, f"pool p of {DRIVER} is set aside: device 'gpu-0' is published twice"],
        id="a duplicate device in the only pool leaves nothing to allocate",
    ),
    pytest.param(
        "TestAllocator/devices-split-across-different-slices",
        [pool_slice("p-1", "p", [gpu("gpu-0")], count=2), pool_slice("p-2", "p", [gpu("gpu-1")], count=2)],
        [], [claim("c", req("g", count=2))], [],
        A, [("c", "g", "gpu-0"), ("c", "g", "gpu-1")],
        id="a pool complete in two slices serves from both",
    ),
    pytest.param(
        "TestAllocator/incomplete pool, ExactCount",
        [pool_slice("p-1", "p", [gpu("gpu-0"), gpu("gpu-1")], count=2)],
        [], [claim("c", req("g"))], [],
        None, [*NO_DEVICE, f"pool p of {DRIVER} is set aside: incomplete: 1 of 2 ResourceSlices of the pool are published"],
        id="an incomplete pool is not allocated from",
    ),
    pytest.param(
        "TestAllocator/all-devices-of-the-incomplete-pool",
        [pool_slice("p-1", "p", [gpu("gpu-0")], count=2), pool_slice("q", "q", [gpu("gpu-1")])],
        [], [claim("c", req("g", all_=True))], [],
        A, [("c", "g", "gpu-1")],
        id="All takes the devices of the complete pools only",
    ),
    pytest.param(
        "TestAllocator/obsolete-slice (a later generation completes the pool)",
        [
            pool_slice("old", "p", [gpu("gpu-7")], count=1),
            pool_slice("new-1", "p", [gpu("gpu-0")], generation=3, count=2),
            pool_slice("new-2", "p", [gpu("gpu-1")], generation=3, count=2),
        ],
        [], [claim("c", req("g", count=3))], [],
        None, ["1 node of class [2x H100] (node-a): claim \"c\" request \"g\": needs 3 devices: 2 devices match but only 2 are free"],
        id="the obsolete slice's device does not count towards three",
    ),
    # --- firstAvailable and constraints --------------------------------------------------------
    pytest.param(
        "TestAllocator (prioritized list: constraint on one subrequest)",
        NUMA_0_1, [],
        [claim("c", first("r", req("big", count=2), req("small")), constraints=[{**NUMA, "requests": ["r/big"]}])],
        [],
        A, [("c", "r/small", "gpu-0")],
        id="a constraint on the first subrequest does not block the fallback",
    ),
    pytest.param(
        "TestAllocator (prioritized list: constraint on one subrequest)",
        NUMA_0_1_1, [],
        [claim("c", first("r", req("big", count=2), req("small")), constraints=[{**NUMA, "requests": ["r/big"]}])],
        [],
        A, [("c", "r/big", "gpu-1"), ("c", "r/big", "gpu-2")],
        id="the constrained subrequest is taken when a NUMA node holds both",
    ),
    pytest.param(
        "TestAllocator (prioritized list: constraint across a request and a subrequest)",
        [node_slice(A, [gpu("gpu-0", model="H100"), gpu("gpu-1", model="A100")])], [],
        [
            claim(
                "c",
                req("a", sel=(f'device.attributes["{DRIVER}"].model == "H100"',)),
                first("r", req("x", sel=(f'device.attributes["{DRIVER}"].model == "A100"',)), req("y")),
                constraints=[{**MODEL, "requests": ["a", "r/x"]}],
            )
        ],
        [],
        A, [("c", "a", "gpu-0"), ("c", "r/y", "gpu-1")],
        id="the named subrequest cannot match, the unnamed one is free of the constraint",
    ),
    # --- consumable capacity -------------------------------------------------------------------
    pytest.param(
        "TestAllocator (consumable capacity: two claims, one multi-allocatable device)",
        ONE_SHAREABLE, [], [claim("c1", req("g")), claim("c2", req("g"))], [],
        A, [("c1", "g", "gpu-0", {"memory": "10Gi"}), ("c2", "g", "gpu-0", {"memory": "10Gi"})],
        id="one shareable device serves two claims (not dropped by counting devices)",
    ),
    pytest.param(
        "TestAllocator (consumable capacity: count 2 on one multi-allocatable device)",
        ONE_SHAREABLE, [], [claim("c", req("g", count=2, capacity={"memory": "15Gi"}))], [],
        A, [("c", "g", "gpu-0", {"memory": "15Gi"}), ("c", "g", "gpu-0", {"memory": "15Gi"})],
        id="two shares of one device for one request",
    ),
    pytest.param(
        "TestAllocator (consumable capacity: not enough left)",
        ONE_SHAREABLE, [], [claim("c", req("g", capacity={"memory": "15Gi"}))], share_of("gpu-0", "30Gi"),
        None, ['1 node of class [1x H100] (node-a): claim "c" request "g": needs 1 device: 1 device matches but only 0 are free (1 without enough capacity left)'],
        id="a share larger than what is left does not fit",
    ),
    pytest.param(
        "TestAllocator (consumable capacity: allocationMode All)",
        TWO_SHAREABLE, [], [claim("c", req("g", all_=True, capacity={"memory": "20Gi"}))], share_of("gpu-0", "30Gi"),
        A, [("c", "g", "gpu-1", {"memory": "20Gi"})],
        id="All with capacity skips the device without room",
    ),
    pytest.param(
        "TestAllocator (consumable capacity: allocationMode All)",
        TWO_SHAREABLE, [], [claim("c", req("g", all_=True, capacity={"memory": "20Gi"}))], [],
        A, [("c", "g", "gpu-0", {"memory": "20Gi"}), ("c", "g", "gpu-1", {"memory": "20Gi"})],
        id="All with capacity takes a share of every device with room",
    ),
    pytest.param(
        "TestAllocator (consumable capacity: allocationMode All)",
        ONE_SHAREABLE, [], [claim("c", req("g", all_=True, capacity={"memory": "20Gi"}))], share_of("gpu-0", "30Gi"),
        None, ['1 node of class [1x H100] (node-a): claim "c" request "g": allocationMode All needs every one of the 1 matching devices, but 1 is not free (1 without enough capacity left)'],
        id="All with capacity fails when no device has room",
    ),
    pytest.param(
        "TestAllocator/all-devices-some-allocated",
        TWO_PLAIN, [], [claim("c", req("g", all_=True))], [allocated("other", A, "gpu-0")],
        None, ['1 node of class [2x H100] (node-a): claim "c" request "g": allocationMode All needs every one of the 2 matching devices, but 1 is not free (1 allocated)'],
        id="All without capacity still needs every matching device free",
    ),
    pytest.param(
        "TestAllocator (consumable capacity with matchAttribute)",
        TWO_SHAREABLE, [], [claim("c", req("g", count=2, capacity={"memory": "10Gi"}), constraints=[NUMA])], [],
        A, [("c", "g", "gpu-0", {"memory": "10Gi"}), ("c", "g", "gpu-0", {"memory": "10Gi"})],
        id="matchAttribute is met by two shares of one device",
    ),
    pytest.param(
        "TestAllocator (consumable capacity with matchAttribute)",
        ONE_SHAREABLE, [],
        [claim("c", req("a", capacity={"memory": "10Gi"}), req("b", capacity={"memory": "10Gi"}), constraints=[NUMA])],
        [],
        A, [("c", "a", "gpu-0", {"memory": "10Gi"}), ("c", "b", "gpu-0", {"memory": "10Gi"})],
        id="matchAttribute across two requests on shares of one device",
    ),
    pytest.param(
        "TestAllocator (consumable capacity with distinctAttribute)",
        ONE_SHAREABLE, [],
        [claim("c", req("g", count=2, capacity={"memory": "10Gi"}), constraints=[{"distinctAttribute": f"{DRIVER}/numaNode"}])],
        [],
        None, ['1 node of class [1x H100] (node-a): claim "c": needs 2 devices with distinct values of gpu.example.com/numaNode, but the free matching devices have only 1'],
        id="distinctAttribute is not met by two shares of one device",
    ),
    # --- taints --------------------------------------------------------------------------------
    pytest.param(
        "TestAllocator (device taint, effect None)",
        [node_slice(A, [gpu("gpu-0", taints=[NONE_TAINT]), gpu("gpu-1")])], [],
        [claim("c", req("g"))], [],
        A, [("c", "g", "gpu-0")],
        id="a taint of effect None keeps nothing off the device",
    ),
    pytest.param(
        "TestAllocator/tainted-two-devices (NoSchedule)",
        [node_slice(A, [gpu("gpu-0", taints=[NO_SCHEDULE]), gpu("gpu-1")])], [],
        [claim("c", req("g"))], [],
        A, [("c", "g", "gpu-1")],
        id="a NoSchedule taint without toleration skips the device",
    ),
    pytest.param(
        "TestAllocator/tolerated-device (NoExecute)",
        [node_slice(A, [gpu("gpu-0", taints=[NO_EXECUTE]), gpu("gpu-1")])], [],
        [claim("c", req("g", tolerations=[{"key": "ecc", "operator": "Exists", "effect": "NoExecute"}]))],
        [],
        A, [("c", "g", "gpu-0")],
        id="a NoExecute taint tolerated by key and effect",
    ),
    pytest.param(
        "TestAllocator/tainted-device (toleration of another effect)",
        [node_slice(A, [gpu("gpu-0", taints=[NO_EXECUTE]), gpu("gpu-1")])], [],
        [claim("c", req("g", tolerations=[{"key": "ecc", "operator": "Exists", "effect": "NoSchedule"}]))],
        [],
        A, [("c", "g", "gpu-1")],
        id="tolerating NoSchedule does not tolerate NoExecute",
    ),
    pytest.param(
        "TestAllocator (DeviceTaintRule by device)",
        TWO_PLAIN, [taint_rule("NoSchedule", {"driver": DRIVER, "pool": A, "device": "gpu-0"})],
        [claim("c", req("g"))], [],
        A, [("c", "g", "gpu-1")],
        id="a DeviceTaintRule taints the device it names",
    ),
    pytest.param(
        "TestAllocator (DeviceTaintRule, effect None)",
        TWO_PLAIN, [taint_rule("None", {"device": "gpu-0"})],
        [claim("c", req("g"))], [],
        A, [("c", "g", "gpu-0")],
        id="a DeviceTaintRule of effect None only informs",
    ),
    pytest.param(
        "TestAllocator (DeviceTaintRule without selector)",
        TWO_PLAIN, [taint_rule("NoExecute", None)],
        [claim("c", req("g"))], [],
        A, [("c", "g", "gpu-0")],
        id="a DeviceTaintRule without a device selector taints nothing",
    ),
    pytest.param(
        "TestAllocator (DeviceTaintRule by pool)",
        [node_slice(A, [gpu("gpu-0")]), node_slice(B, [gpu("gpu-0")])], [taint_rule("NoSchedule", {"pool": A})],
        [claim("c", req("g"))], [],
        B, [("c", "g", "gpu-0")],
        id="a DeviceTaintRule over a pool sends the claim to the other node",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("upstream", "slices", "rules", "claims", "in_use", "want_node", "want"), CASES
)
def test_allocation_follows_the_upstream_table(
    upstream: str,
    slices: list[ResourceSlice],
    rules: list[DeviceTaintRule],
    claims: list[ResourceClaim],
    in_use: list[ResourceClaim],
    want_node: str | None,
    want: list[Any],
) -> None:
    assert upstream.startswith("TestAllocator")
    inventory = Inventory(slices, taint_rules=rules)
    result = allocate_pod(claims, inventory, CLASSES, inventory.in_use(in_use))
    if want_node is None:
        assert not result.fits
        assert list(result.reasons) == want
        return
    assert result.allocation is not None, result.reasons
    assert result.allocation.node == want_node
    got: list[tuple[Any, ...]] = []
    for pick in result.allocation.picks:
        row = pick.result()
        if row.consumed_capacity:
            got.append((pick.claim, pick.request, pick.device.name, row.consumed_capacity))
        else:
            got.append((pick.claim, pick.request, pick.device.name))
    assert got == [tuple(w) for w in want]


def test_table_is_big_enough() -> None:
    assert len(CASES) >= 20


class TestPools:
    def test_unusable_pools_say_why(self) -> None:
        inventory = Inventory(
            [
                pool_slice("p-1", "p", [gpu("gpu-0")], count=2),
                pool_slice("p-2", "p", [gpu("gpu-0")], count=2),
                pool_slice("q-1", "q", [gpu("gpu-1")], count=3),
            ]
        )
        assert inventory.unusable_pools == {
            (DRIVER, "p"): "device 'gpu-0' is published twice",
            (DRIVER, "q"): "incomplete: 1 of 3 ResourceSlices of the pool are published",
        }
        assert inventory.by_id == {}

    def test_the_missing_slice_arriving_completes_the_pool(self) -> None:
        inventory = Inventory([pool_slice("p-1", "p", [gpu("gpu-0")], count=2)])
        assert inventory.by_id == {}
        inventory.put_slice(pool_slice("p-2", "p", [gpu("gpu-1")], count=2))
        assert sorted(d.name for d in inventory.by_id.values()) == ["gpu-0", "gpu-1"]
        assert inventory.unusable_pools == {}
        inventory.remove_slice("p-2")
        assert inventory.by_id == {}

    def test_an_allocation_on_an_unusable_pool_still_holds_its_device(self) -> None:
        inventory = Inventory([pool_slice("p-1", "p", [gpu("gpu-0")], count=2)])
        held = inventory.in_use([allocated("other", "p", "gpu-0")])
        assert held.devices == {(DRIVER, "p", "gpu-0")}


class TestTaintApi:
    def test_effect_none_and_a_taint_rule_load(self) -> None:
        text = """
apiVersion: resource.k8s.io/v1beta2
kind: DeviceTaintRule
metadata: {name: drain-gpu-0}
spec:
  deviceSelector: {driver: gpu.example.com, pool: node-a, device: gpu-0}
  taint: {key: maintenance, effect: None}
"""
        (rule,) = load_device_documents(text)
        assert isinstance(rule, DeviceTaintRule)
        assert rule.spec.taint.effect == "None"

    def test_an_unknown_effect_is_refused_naming_the_field(self) -> None:
        text = """
apiVersion: resource.k8s.io/v1beta2
kind: DeviceTaintRule
metadata: {name: bad}
spec:
  taint: {key: maintenance, effect: Evict}
"""
        with pytest.raises(InvalidObject) as caught:
            load_device_documents(text, source="rule.yaml")
        assert "spec.taint.effect" in str(caught.value)
        assert "\n" not in str(caught.value)


def test_the_worked_example_of_docs_devices() -> None:
    old = pool_slice("old", "p", [gpu("gpu-0", numa=0)])
    first_half = pool_slice("new-1", "p", [gpu("gpu-1", numa=0)], generation=1, count=2)
    second_half = pool_slice("new-2", "p", [gpu("gpu-2", numa=1)], generation=1, count=2)
    pod = [
        claim(
            "c",
            first("r", req("pair", count=2), req("one")),
            constraints=[{**NUMA, "requests": ["r/pair"]}],
        )
    ]
    inventory = Inventory([old, first_half])
    assert not allocate_pod(pod, inventory, CLASSES).fits
    inventory.put_slice(second_half)
    result = allocate_pod(pod, inventory, CLASSES)
    assert result.allocation is not None
    assert [(p.request, p.device.name) for p in result.allocation.picks] == [("r/one", "gpu-1")]


class TestResults:
    def test_two_shares_of_one_device_for_one_request_have_their_own_share_ids(self) -> None:
        inventory = Inventory(ONE_SHAREABLE)
        pod = [claim("c", req("g", count=2, capacity={"memory": "15Gi"}))]
        result = allocate_pod(pod, inventory, CLASSES)
        assert result.allocation is not None
        ids = [p.result().share_id for p in result.allocation.picks]
        assert len(ids) == 2 and ids[0] != ids[1] and None not in ids

    def test_the_requests_tolerations_are_in_the_result(self) -> None:
        """As TestAllocator's tainted cases expect: the result carries the request's
        tolerations (the kubelet side checks them again)."""
        toleration = {"key": "ecc", "operator": "Exists", "effect": "NoExecute"}
        slices = [node_slice(A, [gpu("gpu-0", taints=[NO_EXECUTE])])]
        inventory = Inventory(slices)
        result = allocate_pod([claim("c", req("g", tolerations=[toleration]))], inventory, CLASSES)
        assert result.allocation is not None
        (row,) = [p.result() for p in result.allocation.picks]
        assert [t.key for t in row.tolerations] == ["ecc"]

    def test_binding_conditions_are_in_the_result(self) -> None:
        """As TestAllocator's binding-conditions cases: the device's bindingConditions and
        bindingFailureConditions go into its allocation result."""
        device = gpu("gpu-0")
        device["bindingConditions"] = ["attached"]
        device["bindingFailureConditions"] = ["failed"]
        inventory = Inventory([node_slice(A, [device])])
        result = allocate_pod([claim("c", req("g"))], inventory, CLASSES)
        assert result.allocation is not None
        (row,) = [p.result() for p in result.allocation.picks]
        assert (row.binding_conditions, row.binding_failure_conditions) == (
            ["attached"],
            ["failed"],
        )
        plain = allocate_pod([claim("c", req("g"))], Inventory(TWO_PLAIN), CLASSES)
        assert plain.allocation is not None
        wire = plain.allocation.picks[0].result().model_dump(by_alias=True, exclude_unset=True)
        assert "tolerations" not in wire and "bindingConditions" not in wire
