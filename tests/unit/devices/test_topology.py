"""Topology files for sim nodes, the topology score, node selectors, allocation results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aipaas.api.devices import DeviceClass, ResourceSlice, dump_device_object
from aipaas.devices.allocator import allocate_pod
from aipaas.devices.inventory import InUse, Inventory
from aipaas.devices.topology_files import (
    TopologyError,
    builtin_topologies,
    load_topology,
    topology_slices,
)
from tests.unit.devices.devices_builders import (
    CLASSES,
    DRIVER,
    claim,
    eight_h100,
    gpu,
    node_slice,
    req,
)


class TestTopologyFiles:
    def test_builtins(self) -> None:
        assert sorted(builtin_topologies()) == [
            "a100-mig-8gpu",
            "h100-hgx-8gpu",
            "h100-pcie-8gpu",
            "mixed-pool",
        ]

    def test_hgx_node_attributes(self) -> None:
        (published,) = topology_slices(load_topology("h100-hgx-8gpu"))
        wire = dump_device_object(published)
        assert wire["spec"]["nodeName"] == "h100-0"
        devices = wire["spec"]["devices"]
        assert len(devices) == 8
        attributes = devices[5]["attributes"]
        assert attributes["nvlinkDomain"] == {"string": "h100-0-nvl0"}
        assert attributes["numaNode"] == {"int": 1}
        assert attributes["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:02"}
        assert attributes["cudaComputeCapability"] == {"version": "9.0.0"}
        assert devices[5]["capacity"]["memory"] == {"value": "80Gi"}

    def test_mig_node_publishes_partitions_per_gpu(self) -> None:
        slices = topology_slices(load_topology("a100-mig-8gpu"))
        assert len(slices) == 8  # one slice per GPU keeps each under 128 devices
        inventory = Inventory(slices)
        inventory.check_counters()
        names = [d.name for d in inventory.by_node["a100mig-0"] if d.name.startswith("gpu-0")]
        assert len(names) == 1 + 7 + 4 + 3 + 2 + 1 + 1
        assert "gpu-0-mig-3g-40gb-4" in names

    def test_mixed_pool_scales(self) -> None:
        slices = topology_slices(load_topology("mixed-pool"), scale=2)
        assert sorted({s.spec.node_name or "" for s in slices}) == sorted(
            [f"l40s-{i}" for i in range(4)] + [f"a10g-{i}" for i in range(4)]
            + [f"l4shared-{i}" for i in range(2)]
        )  # fmt: skip

    def test_bad_file_names_file_and_field(self, tmp_path: Path) -> None:
        bad = tmp_path / "bad.yaml"
        bad.write_text("name: x\nnodes:\n- gpus: {count: 2, model: H100, productName: H, "
                       "nvlinkDomains: [[0, 5]]}\n")  # fmt: skip
        with pytest.raises(TopologyError, match=r"bad\.yaml: nodes\.0\.gpus: .*index 5"):
            load_topology(bad)

    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(TopologyError, match="cannot read"):
            load_topology(tmp_path / "nope.yaml")


class TestTopologyScore:
    def test_one_domain_scores_above_two(self) -> None:
        inventory = Inventory([node_slice("a", eight_h100()), node_slice("b", eight_h100())])
        busy = InUse(devices={(DRIVER, "a", "gpu-0"), (DRIVER, "a", "gpu-4")})
        pod = [claim("c", req("g", count=4))]
        result = allocate_pod(pod, inventory, CLASSES, busy, best=True)
        assert result.allocation is not None
        assert result.allocation.node == "b"
        assert result.allocation.score == 100.0
        # On node a the four GPUs must span both NVLink domains (3 free in each): the fewest
        # possible there, so no NVLink or NUMA penalty. The order is greedy per domain (gpu-2
        # and gpu-3 share a PCIe root, then gpu-1; then gpu-6), so three PCIe roots are spanned
        # where two would do (gpu-2, gpu-3, gpu-6, gpu-7): minus 5.
        only_a = allocate_pod(pod, inventory, CLASSES, busy, nodes=["a"])
        assert only_a.allocation is not None
        assert [p.device.name for p in only_a.allocation.picks] == [
            "gpu-2", "gpu-3", "gpu-1", "gpu-6"
        ]  # fmt: skip
        assert only_a.allocation.score == 95.0

    def test_breaking_a_whole_domain_costs(self) -> None:
        inventory = Inventory([node_slice("a", eight_h100())])
        busy = InUse(devices={(DRIVER, "a", "gpu-0")})
        result = allocate_pod([claim("c", req("g"))], inventory, CLASSES, busy)
        assert result.allocation is not None
        assert [p.device.name for p in result.allocation.picks] == ["gpu-1"]
        assert result.allocation.score == 100.0


def selector_slice(terms: list[dict[str, Any]]) -> ResourceSlice:
    return ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "nic-pool"},
            "spec": {
                "driver": "nic.example.com",
                "pool": {"name": "fabric"},
                "nodeSelector": {"nodeSelectorTerms": terms},
                "devices": [{"name": "nic-0", "attributes": {"type": {"string": "nic"}}}],
            },
        }
    )


NIC = DeviceClass.model_validate(
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "nic"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "nic.example.com"'}}]},
    }
)


class TestNodeSelection:
    def test_node_selector_by_label(self) -> None:
        terms = [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r2"]}]}]
        inventory = Inventory(
            [
                node_slice("a", [gpu("gpu-0")]),
                node_slice("b", [gpu("gpu-0")]),
                selector_slice(terms),
            ],
            node_labels={"a": {"rack": "r1"}, "b": {"rack": "r2"}},
        )
        pod = [claim("c", req("g"), req("n", "nic"))]
        result = allocate_pod(pod, inventory, {**CLASSES, "nic": NIC})
        assert result.allocation is not None
        assert result.allocation.node == "b"
        assert [p.device.name for p in result.allocation.picks] == ["gpu-0", "nic-0"]

    def test_node_selector_by_name_field(self) -> None:
        terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}]
        inventory = Inventory([node_slice("a", [gpu("gpu-0")]), selector_slice(terms)])
        result = allocate_pod([claim("c", req("n", "nic"))], inventory, {"nic": NIC})
        assert result.allocation is not None and result.allocation.node == "a"

    def test_all_nodes_device_and_allocation_result(self) -> None:
        shared = ResourceSlice.model_validate(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "fabric"},
                "spec": {
                    "driver": "nic.example.com",
                    "pool": {"name": "fabric"},
                    "allNodes": True,
                    "devices": [{"name": "nic-0"}],
                },
            }
        )
        inventory = Inventory([node_slice("a", [gpu("gpu-0")]), shared])
        only_nic = claim("net", req("n", "nic"))
        result = allocate_pod([only_nic], inventory, {"nic": NIC})
        assert result.allocation is not None
        status = result.allocation.allocation_result(only_nic, {"nic": NIC})
        assert status.node_selector is None
        both = claim("both", req("g"), req("n", "nic"))
        result = allocate_pod([both], inventory, {**CLASSES, "nic": NIC})
        assert result.allocation is not None
        status = result.allocation.allocation_result(both, {**CLASSES, "nic": NIC})
        assert status.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True) == {
            "devices": {
                "results": [
                    {"request": "g", "driver": DRIVER, "pool": "a", "device": "gpu-0"},
                    {"request": "n", "driver": "nic.example.com", "pool": "fabric",
                     "device": "nic-0"},
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}
                ]
            },
        }  # fmt: skip

    def test_class_and_claim_config_in_the_result(self) -> None:
        configured = DeviceClass.model_validate(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "gpu"},
                "spec": {
                    "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
                    "config": [{"opaque": {"driver": DRIVER, "parameters": {"sharing": "none"}}}],
                },
            }
        )
        inventory = Inventory([node_slice("a", [gpu("gpu-0")])])
        item = claim("c", req("g"))
        item.spec.devices.config = []
        result = allocate_pod([item], inventory, {"gpu": configured})
        assert result.allocation is not None
        status = result.allocation.allocation_result(item, {"gpu": configured})
        (config,) = status.devices.config
        assert config.source == "FromClass"
        assert config.requests == []  # it applies to every request: kube-scheduler omits them
        assert config.opaque is not None and config.opaque.parameters == {"sharing": "none"}
