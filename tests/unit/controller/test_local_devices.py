"""On the local backend a task is pinned to the devices its claims got: CUDA_VISIBLE_DEVICES
names them (GPU indices; MIG UUIDs when a MIG device is among them), for the ``gpu:`` short
form, explicit claims and shared claims; a task without GPUs sees none."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from aipaas.api.devices import ResourceSlice
from aipaas.backends.local import LocalBackend
from aipaas.controller.cycle import Controller
from tests.support.ctl_world import World, cycle_until

EXAMPLES = Path(__file__).parents[3] / "examples" / "dra"
DRIVER = "gpu.nvidia.com"


def device(name: str, kind: str, uuid: str, **ints: int) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "type": {"string": kind},
        "uuid": {"string": uuid},
        "model": {"string": "H100"},
    }
    attributes.update({k: {"int": v} for k, v in ints.items()})
    return {"name": name, "attributes": attributes, "capacity": {"memory": {"value": "80Gi"}}}


def here_slice() -> ResourceSlice:
    """Two H100s and one MIG device of the second, as nvml.py would publish them."""
    return ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"here-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "here",
                "pool": {"name": "here", "resourceSliceCount": 1},
                "devices": [
                    device("gpu-0", "gpu", "GPU-aaaa", index=0),
                    device("gpu-1", "gpu", "GPU-bbbb", index=1),
                    device("gpu-1-mig-0", "mig", "MIG-cccc", parentIndex=1),
                ],
            },
        }
    )


def local(world: World) -> Controller:
    world.setup("{gpu: 8, cpu: 64, memory: 512Gi}")
    world.service.apply_text((EXAMPLES / "nvidia-classes.yaml").read_text())
    backend = LocalBackend(
        world.tmp / "run",
        node_name="here",
        cpu_milli=8000,
        memory_mib=8192,
        published=here_slice(),
    )
    return world.controller(backend, inventory_seconds=0)


def task(out: Path, resources: str, replicas: int = 1) -> str:
    script = (
        f"import os; open(os.path.join({str(out)!r}, os.environ['AIPAAS_TASK']), 'w')"
        ".write(repr(os.environ.get('CUDA_VISIBLE_DEVICES')))"
    )
    return (
        f"    - name: worker\n      replicas: {replicas}\n"
        f"      command: [{sys.executable}, -c, {script!r}]\n"
        f"      resources: {resources}\n"
    )


def seen(out: Path, name: str = "worker-0") -> str:
    return (out / name).read_text()


def test_short_form_explicit_mig_and_none(world: World, tmp_path: Path) -> None:
    controller = local(world)
    controller.run_cycle()  # the slice is published
    world.service.apply_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\n"
        "metadata: {name: slice, namespace: acme}\nspec:\n  devices:\n    requests:\n"
        "    - name: mig\n      exactly: {deviceClassName: mig.nvidia.com}\n"
    )
    outs = {name: tmp_path / name for name in ("short", "mig", "cpu")}
    for out in outs.values():
        out.mkdir()
    world.submit("short", task(outs["short"], "{cpu: 1, memory: 64Mi, gpu: 1}"))
    world.submit(
        "mig",
        task(outs["mig"], "{cpu: 1, memory: 64Mi, claims: [{name: m, resourceClaimName: slice}]}"),
    )
    world.submit("cpu", task(outs["cpu"], "{cpu: 1, memory: 64Mi}"))
    cycle_until(
        controller,
        lambda: all(world.phase(n) == "Succeeded" for n in ("short", "mig", "cpu")),
    )
    assert seen(outs["short"]) == "'0'"  # gpu-0: the device its compiled claim got
    assert seen(outs["mig"]) == "'MIG-cccc'"
    assert seen(outs["cpu"]) == "''"  # no GPU asked: none visible


def test_replicas_of_a_shared_claim_see_the_same_gpu(world: World, tmp_path: Path) -> None:
    controller = local(world)
    controller.run_cycle()
    world.service.apply_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\n"
        "metadata: {name: shared, namespace: acme}\nspec:\n  devices:\n    requests:\n"
        "    - name: g\n      exactly:\n        deviceClassName: gpu.nvidia.com\n"
        "        selectors:\n"
        "        - cel: {expression: 'device.attributes[\"gpu.nvidia.com\"].index == 1'}\n"
    )
    world.submit(
        "pair",
        task(
            tmp_path,
            "{cpu: 1, memory: 64Mi, claims: [{name: g, resourceClaimName: shared}]}",
            replicas=2,
        ),
    )
    cycle_until(controller, lambda: world.phase("pair") == "Succeeded")
    assert seen(tmp_path, "worker-0") == seen(tmp_path, "worker-1") == "'1'"
