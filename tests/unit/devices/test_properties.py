"""Properties of the allocator over random sequences of pods.

Checked from the allocation results alone (not from the allocator's own bookkeeping):
no device is held twice, no shared counter or capacity is over-committed, and a MIG-partitioned
GPU is never also allocated whole.
"""

from __future__ import annotations

import re
from collections import Counter
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aipaas.api.devices import ResourceClaim
from aipaas.api.quantity import parse_quantity
from aipaas.devices.allocator import allocate_pod
from aipaas.devices.inventory import Inventory
from aipaas.devices.topology_files import GpuShape, gpu_node_slices
from tests.unit.devices.devices_builders import claim, device_class, req

NV = "gpu.nvidia.com"
SLICES = (
    gpu_node_slices("mig", GpuShape(count=2, model="A100", productName="A100", mig="a100-80gb",
                                    multiprocessors=98))
    + gpu_node_slices("shared", GpuShape(count=1, model="L4", productName="L4", memory="24Gi",
                                         shared=True))
    + gpu_node_slices("plain", GpuShape(count=2, model="H100", productName="H100",
                                        numaNodes=[[0], [1]]))
)  # fmt: skip
CLASSES = {
    "nvidia-gpu": device_class("nvidia-gpu", f'device.attributes["{NV}"].type == "gpu"'),
    "nvidia-mig": device_class("nvidia-mig", f'device.attributes["{NV}"].type == "mig"'),
}
PROFILES = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]

whole = st.builds(lambda n: req("r", "nvidia-gpu", count=n), st.integers(1, 3))
mig = st.builds(
    lambda p, n: req("r", "nvidia-mig", count=n,
                     sel=(f'device.attributes["{NV}"].profile == "{p}"',)),
    st.sampled_from(PROFILES), st.integers(1, 2),
)  # fmt: skip
shared = st.builds(
    lambda mem, cpu: req("r", "nvidia-gpu", capacity={"memory": f"{mem}Gi", "compute": str(cpu)}),
    st.integers(1, 24), st.integers(0, 100),
)  # fmt: skip
requests = st.one_of(whole, mig, shared)
pods = st.lists(
    st.lists(st.tuples(requests, st.booleans()), min_size=1, max_size=2), min_size=1, max_size=10
)


def allocated_claim(name: str, spec: ResourceClaim, results: list[dict[str, Any]]) -> ResourceClaim:
    return ResourceClaim.model_validate(
        {
            **spec.model_dump(by_alias=True, exclude_unset=True),
            "metadata": {"name": name},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )


def check_invariants(inventory: Inventory, claims: list[ResourceClaim]) -> None:
    exclusive: Counter[tuple[str, str, str]] = Counter()
    capacity: dict[tuple[str, str, str], dict[str, Decimal]] = {}
    users: set[tuple[str, str, str]] = set()
    for item in claims:
        assert item.status is not None and item.status.allocation is not None
        for result in item.status.allocation.devices.results:
            device_id = (result.driver, result.pool, result.device)
            users.add(device_id)
            record = inventory.by_id[device_id]
            if record.multiple:
                used = capacity.setdefault(device_id, {})
                for key, value in result.consumed_capacity.items():
                    used[key] = used.get(key, Decimal(0)) + parse_quantity(value)
            else:
                exclusive[device_id] += 1
    # 1. No exclusive device twice.
    assert all(n == 1 for n in exclusive.values()), exclusive
    # 2. No shared capacity over-committed.
    for device_id, used in capacity.items():
        record = inventory.by_id[device_id]
        for capacity_name, amount in used.items():
            total = record.capacity[f"{NV}/{capacity_name}"]
            assert amount <= total, (device_id, capacity_name, amount)
    # 3. No counter over-committed (a shared device counts once).
    counters: dict[tuple[str, str, str], Counter[str]] = {}
    for device_id in users:
        for counter_set, wanted in inventory.by_id[device_id].consumes:
            for counter, count in wanted.items():
                counters.setdefault(counter_set, Counter())[counter] += int(count)
    for counter_set, used_counters in counters.items():
        for counter, taken in used_counters.items():
            limit = inventory.counter_sets[counter_set][counter]
            assert taken <= limit, (counter_set, counter, taken)
    # 4. A partitioned GPU is never also whole.
    for driver, pool, name in users:
        if "-mig-" in name:
            parent = (driver, pool, name.split("-mig-")[0])
            assert parent not in users, (parent, name)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods)
def test_no_over_commit_over_random_pods(pod_list: list[list[tuple[dict[str, Any], bool]]]) -> None:
    inventory = Inventory(SLICES)
    done: list[ResourceClaim] = []
    for pod_index, pod in enumerate(pod_list):
        pod_claims = [
            claim(
                f"p{pod_index}-c{i}",
                request,
                constraints=[{"matchAttribute": f"{NV}/numaNode"}] if match else None,
            )
            for i, (request, match) in enumerate(pod)
        ]
        result = allocate_pod(pod_claims, inventory, CLASSES, inventory.in_use(done), best=True)
        if result.allocation is None:
            assert result.reasons
            continue
        by_claim = result.allocation.by_claim()
        for item in pod_claims:
            name = item.metadata.name or ""
            rows = [r.model_dump(by_alias=True, exclude_none=True) for r in by_claim[name]]
            done.append(allocated_claim(name, item, rows))
        check_invariants(inventory, done)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from([*PROFILES, "whole"]), min_size=1, max_size=12))
def test_mig_gpu_is_whole_or_partitions(choices: list[str]) -> None:
    inventory = Inventory(SLICES[:2])  # the two MIG GPUs of node "mig"
    done: list[ResourceClaim] = []
    for index, choice in enumerate(choices):
        if choice == "whole":
            request = req("r", "nvidia-gpu")
        else:
            selector = f'device.attributes["{NV}"].profile == "{choice}"'
            request = req("r", "nvidia-mig", sel=(selector,))
        item = claim(f"c{index}", request)
        result = allocate_pod([item], inventory, CLASSES, inventory.in_use(done))
        if result.allocation is None:
            continue
        rows = [r.model_dump(by_alias=True, exclude_none=True)
                for r in result.allocation.by_claim()[f"c{index}"]]  # fmt: skip
        done.append(allocated_claim(f"c{index}", item, rows))
        check_invariants(inventory, done)
    # Capacity is used: whenever something was refused, the GPUs really were taken.
    assert len(done) >= min(len(choices), 2)


EXPRESSIONS = [
    f'device.attributes["{NV}"].model == "A100"',
    f'device.attributes["{NV}"].index > 1 && device.driver == "{NV}"',
    f'has(device.attributes["{NV}"].rack) && device.attributes["{NV}"].rack == "r1"',
    f'"rack" in device.attributes["{NV}"]',
    'device.attributes["other.example.com"].zone == "z1"',
    '!has(device.attributes["other.example.com"].zone)',
    f'device.capacity["{NV}"].memory.compareTo(quantity("40Gi")) >= 0',
    f'device.attributes["{NV}"].all(k, k != "rack")',
    f'device.attributes["{NV}"]["model"].startsWith("A")',
    'device.attributes.exists(d, d == "other.example.com")',
    f'[device][0].attributes["{NV}"].model == "H100"',
]

attribute_values = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["A100", "H100"]).map(lambda v: {"string": v}),
        "index": st.integers(0, 3).map(lambda v: {"int": v}),
        "rack": st.sampled_from(["r1", "r2"]).map(lambda v: {"string": v}),
        "other.example.com/zone": st.sampled_from(["z1", "z2"]).map(lambda v: {"string": v}),
    },
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(attribute_values, st.sampled_from(["40Gi", "80Gi"])), min_size=1, max_size=6)
)
def test_projected_answers_equal_full_evaluation(devices: list[tuple[dict[str, Any], str]]) -> None:
    """The per-projection cache never changes an answer (the device read whole agrees)."""
    from aipaas.api.devices import ResourceSlice
    from aipaas.devices import selection
    from aipaas.devices.cel import CelEvalError, compile_selector

    published = ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "p"},
            "spec": {
                "driver": NV,
                "nodeName": "n",
                "pool": {"name": "n"},
                "devices": [
                    {"name": f"d-{i}", "attributes": attrs, "capacity": {"memory": {"value": mem}}}
                    for i, (attrs, mem) in enumerate(devices)
                ],
            },
        }
    )
    inventory = Inventory([published])
    for expression in EXPRESSIONS:
        compiled = compile_selector(expression)
        for record in inventory.by_node["n"]:
            # The device read whole; domains the expression names read as empty maps.
            named = set(re.findall(r'\["([a-z.]+)"\]', expression))
            whole: dict[str, Any] = {
                "driver": NV,
                "attributes": {d: {} for d in named},
                "capacity": {d: {} for d in named},
            }
            for kind in ("attributes", "capacity"):
                for domain, values in record.cel_value[kind].items():
                    whole[kind].setdefault(domain, {}).update(values)
            try:
                want: bool | str = compiled.evaluate(whole)
            except CelEvalError as err:
                want = str(err)
            assert selection.evaluate(compiled, record) == want, (expression, record.name)


operations = st.lists(
    st.tuples(
        st.sampled_from(["reserve", "unreserve"]),
        st.integers(0, 4),  # owner
        st.one_of(whole, mig, shared),
        st.sampled_from(["mig", "shared", "plain"]),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=50, deadline=None)
@given(operations)
def test_ledger_reserve_unreserve(ops: list[tuple[str, int, dict[str, Any], str]]) -> None:
    """Whatever the order of reserve and unreserve, nothing is over-committed, and giving
    everything back leaves the ledger as empty as it started."""
    from aipaas.devices.ledger import DeviceLedger

    inventory = Inventory(SLICES)
    book = DeviceLedger(inventory, CLASSES)
    for action, owner_number, request, node in ops:
        owner = f"pod-{owner_number}"
        if action == "unreserve":
            book.unreserve(owner)
            continue
        pod = [claim(f"{owner}-c", request)]
        book.reserve(owner, pod, node)
        rows = []
        for holder, allocation in book.reserved.items():
            for item in allocation.by_claim().values():
                rows.append(
                    allocated_claim(
                        holder,
                        pod[0],
                        [r.model_dump(by_alias=True, exclude_none=True) for r in item],
                    )
                )
        check_invariants(inventory, rows)
    for owner_number in range(5):
        book.unreserve(f"pod-{owner_number}")
    assert book.in_use.devices == set()
    assert not any(book.in_use.shares.values())
    assert all(v == 0 for counters in book.in_use.counters.values() for v in counters.values())
    assert all(v == 0 for used in book.in_use.capacity.values() for v in used.values())
