"""The sim backend publishes ResourceSlices from a topology; the controller stores them."""

from __future__ import annotations

from pathlib import Path

import pytest

from aipaas.api.devices import ResourceSlice
from aipaas.api.dra import ResourceSliceObject
from aipaas.backends.registry import make_backend
from aipaas.backends.sim import SimBackend
from aipaas.backends.sim.cluster import load_cluster_with_slices
from aipaas.clock import VirtualClock
from tests.support.ctl_world import World


def test_default_cluster_publishes_hgx_h100_slices() -> None:
    nodes, slices = load_cluster_with_slices()
    assert [s.spec.node_name for s in slices] == [n.name for n in nodes]
    devices = slices[0].spec.devices
    assert len(devices) == 8
    attributes = devices[0].attributes
    assert attributes["model"].string == "H100"
    assert attributes["nvlinkDomain"].string == "sim-dgx-0-nvl0"
    assert {d.attributes["numaNode"].int_ for d in devices} == {0, 1}


def test_a_named_topology_and_a_plain_shape(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "nodes:\n"
        "  - {name: mig, cpu: 64, memory: 1Ti, topology: a100-mig-8gpu,"
        " gpus: {count: 8, model: A100, memory: 80Gi}}\n"
        "  - {name: l4, cpu: 16, memory: 64Gi, gpus: {count: 2, model: L4, memory: 24Gi}}\n"
        "  - {name: cpu, cpu: 16, memory: 64Gi}\n"
    )
    _, slices = load_cluster_with_slices(cluster)
    by_node: dict[str, list[ResourceSlice]] = {}
    for item in slices:
        by_node.setdefault(item.spec.node_name or "", []).append(item)
    assert set(by_node) == {"mig", "l4"}
    assert any(s.spec.shared_counters for s in by_node["mig"])
    l4 = by_node["l4"][0].spec.devices
    assert [d.attributes["model"].string for d in l4] == ["L4", "L4"]
    assert str(l4[0].capacity["memory"].value) == "24Gi"


def test_an_unknown_topology_is_an_error(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "nodes: [{name: x, cpu: 1, memory: 1Gi, topology: /nope.yaml, gpus: {count: 1}}]\n"
    )
    with pytest.raises(ValueError, match="nodes x"):
        load_cluster_with_slices(cluster)


def test_the_controller_stores_the_published_slices(world: World) -> None:
    world.setup()
    clock = VirtualClock()
    backend = make_backend("sim", world.tmp / "run", clock=clock)
    assert isinstance(backend, SimBackend)
    controller = world.controller(backend, clock)
    controller.run_cycle()
    stored = world.store.list_objects("ResourceSlice", "")
    assert sorted(s.name for s in stored) == ["sim-dgx-0-gpus", "sim-dgx-1-gpus"]
    first = stored[0]
    assert isinstance(first, ResourceSliceObject)
    assert first.metadata.labels["aipaas.dev/published-by"] == "backend"
    published = first.device()
    assert isinstance(published, ResourceSlice)
    assert len(published.spec.devices) == 8
    # A slice no longer reported goes; one applied by an admin stays.
    world.service.apply_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: admin-slice}\n"
        "spec: {driver: x.example.com, nodeName: n, pool: {name: n, resourceSliceCount: 1}}\n"
    )
    backend.slices = backend.slices[:1]
    clock.advance(60)
    controller.run_cycle()
    names = sorted(s.name for s in world.store.list_objects("ResourceSlice", ""))
    assert names == ["admin-slice", "sim-dgx-0-gpus"]


def test_a_stored_slice_is_parsed_once_per_version(world: World) -> None:
    world.service.apply_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\n"
        "spec: {driver: x.example.com, nodeName: n, pool: {name: n, resourceSliceCount: 1}}\n"
    )
    first = world.store.get("ResourceSlice", "", "s")
    again = world.store.get("ResourceSlice", "", "s")
    assert isinstance(first, ResourceSliceObject) and isinstance(again, ResourceSliceObject)
    assert first.device() is again.device()
    world.service.apply_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\n"
        "spec: {driver: x.example.com, nodeName: m, pool: {name: m, resourceSliceCount: 1}}\n"
    )
    changed = world.store.get("ResourceSlice", "", "s")
    assert isinstance(changed, ResourceSliceObject)
    typed = changed.device()
    assert isinstance(typed, ResourceSlice) and typed.spec.node_name == "m"


def test_a_conflicting_slice_is_left_out_and_the_cycle_goes_on(world: World) -> None:
    world.setup()
    clock = VirtualClock()
    controller = world.controller(make_backend("sim", world.tmp / "run", clock=clock), clock)
    controller.run_cycle()
    # An admin publishes gpu-0 of sim-dgx-0's pool a second time.
    world.service.apply_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: dup}\n"
        "spec:\n  driver: gpu.nvidia.com\n  nodeName: sim-dgx-0\n"
        "  pool: {name: sim-dgx-0, generation: 1, resourceSliceCount: 1}\n"
        "  devices: [{name: gpu-0}]\n"
    )
    controller.run_cycle()
    # As Kubernetes gathers pools: that pool is set aside whole, the other node's is not.
    assert "'gpu-0' is published twice" in controller._slice_index.refused["dup"]
    assert len(controller._slice_index.inventory.by_id) == 8
    world.service.delete("ResourceSlice", "dup", None)
    controller.run_cycle()
    assert controller._slice_index.refused == {}
