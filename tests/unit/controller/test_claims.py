"""Jobs whose tasks use DRA claims: placed by the device allocator, status.allocation written,
freed when the task ends; an unsatisfiable claim says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from aipaas.api.dra import ResourceClaimObject
from aipaas.backends.registry import make_backend
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.errors import InvalidObject
from tests.support.ctl_world import World

EXAMPLES = Path(__file__).parents[3] / "examples" / "dra"
CLAIM = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: {name}, namespace: acme}}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {{deviceClassName: gpu.nvidia.com, count: {count}}}
    constraints:
    - matchAttribute: gpu.nvidia.com/nvlinkDomain
"""
TASK = """    - name: worker
      command: [train]
      resources:
        cpu: 1
        claims: [{{name: gpus, resourceClaimName: {claim}}}]
"""


def setup(world: World) -> tuple[Controller, VirtualClock]:
    world.setup("{gpu: 100}")
    world.service.apply_text((EXAMPLES / "nvidia-classes.yaml").read_text())
    clock = VirtualClock()
    backend = make_backend("sim", world.tmp / "run", clock=clock)
    return world.controller(backend, clock, inventory_seconds=0), clock


def claim(world: World, name: str) -> ResourceClaimObject:
    stored = world.store.get("ResourceClaim", "acme", name)
    assert isinstance(stored, ResourceClaimObject)
    return stored


def test_a_claim_is_allocated_then_freed(world: World) -> None:
    controller, clock = setup(world)
    controller.run_cycle()  # slices published
    world.service.apply_text(CLAIM.format(name="two", count=2))
    world.submit("train", TASK.format(claim="two"))
    controller.run_cycle()
    assert world.phase("train") in ("Pending", "Running"), world.job("train").status
    status = claim(world, "two").status
    assert status is not None and status.allocation is not None
    results = status.allocation["devices"]["results"]
    assert [r["device"] for r in results] == ["gpu-0", "gpu-1"]
    assert {r["pool"] for r in results} == {"sim-dgx-0"}
    assert status.reserved_for[0]["name"] == "train/worker-0"
    reasons = [e.reason for e in world.store.list_events(kind="ResourceClaim", name="two")]
    assert "Allocated" in reasons
    clock.advance(60)
    controller.run_cycle()
    controller.run_cycle()
    assert world.phase("train") == "Succeeded"
    assert claim(world, "two").status is None


def test_two_jobs_get_different_devices(world: World) -> None:
    controller, _ = setup(world)
    controller.run_cycle()
    for name in ("a", "b"):
        world.service.apply_text(CLAIM.format(name=name, count=4))
        world.submit(f"job-{name}", TASK.format(claim=name))
    controller.run_cycle()
    held: list[tuple[str, str]] = []
    for name in ("a", "b"):
        status = claim(world, name).status
        assert status is not None and status.allocation is not None
        held.extend((r["pool"], r["device"]) for r in status.allocation["devices"]["results"])
    assert len(held) == len(set(held)) == 8


def test_an_unsatisfiable_claim_says_why(world: World) -> None:
    controller, _ = setup(world)
    controller.run_cycle()
    world.service.apply_text(CLAIM.format(name="huge", count=9))
    world.submit("big", TASK.format(claim="huge"))
    controller.run_cycle()
    status = world.job("big").status
    assert status is not None and status.reason == "Unschedulable"
    assert "0/2 nodes are available" in status.message
    assert claim(world, "huge").status is None
    events = world.store.list_events(kind="ResourceClaim", name="huge")
    assert [e.reason for e in events][-1] == "Unschedulable"


def test_a_missing_claim_says_so(world: World) -> None:
    controller, _ = setup(world)
    controller.run_cycle()
    world.submit("orphan", TASK.format(claim="nope"))
    controller.run_cycle()
    status = world.job("orphan").status
    assert status is not None and status.reason == "Unschedulable"
    assert status.message == "task worker: claim nope does not exist in tenant acme"


TEMPLATE = """apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: four-linked, namespace: acme}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {deviceClassName: gpu.nvidia.com, count: 4}
      constraints:
      - matchAttribute: gpu.nvidia.com/nvlinkDomain
"""
REPLICAS = """    - name: worker
      replicas: 3
      command: [train]
      resources:
        cpu: 1
        claims: [{name: gpus, resourceClaimTemplateName: four-linked}]
"""


def test_a_template_gives_each_replica_its_own_claim(world: World) -> None:
    controller, clock = setup(world)
    controller.run_cycle()
    world.service.apply_text(TEMPLATE)
    world.submit("wide", REPLICAS)
    controller.run_cycle()
    held: list[tuple[str, str]] = []
    for index in range(3):
        made = claim(world, f"wide-worker-{index}-gpus")
        assert made.metadata.annotations["aipaas.dev/from-template"] == "four-linked"
        assert made.status is not None and made.status.allocation is not None
        assert made.status.reserved_for[0]["name"] == f"wide/worker-{index}"
        results = made.status.allocation["devices"]["results"]
        assert len(results) == 4 and len({r["pool"] for r in results}) == 1
        held.extend((r["pool"], r["device"]) for r in results)
    assert len(set(held)) == 12
    clock.advance(60)
    controller.run_cycle()
    controller.run_cycle()
    assert world.phase("wide") == "Succeeded"
    assert world.store.list_objects("ResourceClaim", "acme") == []


def test_a_template_that_does_not_fit_four_times(world: World) -> None:
    controller, _ = setup(world)
    controller.run_cycle()
    world.service.apply_text(TEMPLATE)
    world.submit("wider", REPLICAS.replace("replicas: 3", "replicas: 5"))
    controller.run_cycle()
    status = world.job("wider").status
    assert status is not None and status.reason == "Unschedulable"
    assert "4 of 5" in status.message and "fit" in status.message
    assert world.store.list_objects("ResourceClaim", "acme") == []


SHARED = REPLICAS.replace("resourceClaimTemplateName: four-linked", "resourceClaimName: one")


def consumers(world: World, name: str) -> list[str]:
    status = claim(world, name).status
    return [r["name"] for r in status.reserved_for] if status is not None else []


def test_replicas_share_a_named_claim_on_its_node(world: World) -> None:
    controller, _ = setup(world)
    controller.run_cycle()
    world.service.apply_text(CLAIM.format(name="one", count=2))
    world.submit("two", SHARED)
    controller.run_cycle()
    status = claim(world, "one").status
    assert status is not None and status.allocation is not None
    results = status.allocation["devices"]["results"]
    assert [(r["pool"], r["device"]) for r in results] == [
        ("sim-dgx-0", "gpu-0"),
        ("sim-dgx-0", "gpu-1"),
    ]
    assert consumers(world, "one") == ["two/worker-0", "two/worker-1", "two/worker-2"]
    tasks = world.job("two").status.tasks  # type: ignore[union-attr]
    assert [t.node for t in tasks] == ["sim-dgx-0"] * 3
    assert [t.gpus for t in tasks] == [[0, 1]] * 3  # the claim's devices, for every replica
    reasons = [e.reason for e in world.store.list_events(kind="ResourceClaim", name="one")]
    assert reasons.count("Allocated") == 1 and reasons.count("Reserved") == 2


def test_a_shared_claim_is_freed_by_its_last_consumer(world: World) -> None:
    controller, clock = setup(world)
    controller.run_cycle()
    world.service.apply_text(CLAIM.format(name="one", count=1))
    world.submit("short", SHARED.replace("replicas: 3", "replicas: 1"), annotations=SHORT)
    controller.run_cycle()
    world.submit("long", SHARED.replace("replicas: 3", "replicas: 1"), annotations=LONG)
    controller.run_cycle()
    assert consumers(world, "one") == ["short/worker-0", "long/worker-0"]
    held = claim(world, "one").status
    assert held is not None and held.allocation is not None
    clock.advance(20)
    for _ in range(3):
        controller.run_cycle()
    assert world.phase("short") == "Succeeded" and world.phase("long") == "Running"
    kept = claim(world, "one").status
    assert kept is not None and kept.allocation == held.allocation
    assert consumers(world, "one") == ["long/worker-0"]
    clock.advance(100)
    for _ in range(3):
        controller.run_cycle()
    assert world.phase("long") == "Succeeded"
    assert claim(world, "one").status is None
    reasons = [e.reason for e in world.store.list_events(kind="ResourceClaim", name="one")]
    assert reasons[-1] == "Deallocated"


SHORT = '{sim.aipaas.dev/duration: "10"}'
LONG = '{sim.aipaas.dev/duration: "100"}'


def test_a_shared_claim_whose_node_is_full_waits_and_says_why(world: World) -> None:
    controller, _ = setup(world)
    controller.run_cycle()
    world.service.apply_text(CLAIM.format(name="one", count=1))
    world.submit(
        "first", SHARED.replace("replicas: 3", "replicas: 1").replace("cpu: 1", "cpu: 200")
    )
    controller.run_cycle()
    world.submit(
        "second", SHARED.replace("replicas: 3", "replicas: 1").replace("cpu: 1", "cpu: 100")
    )
    controller.run_cycle()
    status = world.job("second").status
    assert status is not None and status.reason == "Unschedulable"
    assert "0/2 nodes are available" in status.message
    assert "Insufficient cpu" in status.message or "insufficient cpu" in status.message
    assert (
        'claim "one" is allocated on node sim-dgx-0, which every task that shares it must run on'
        in status.message
    )
    assert consumers(world, "one") == ["first/worker-0"]


def test_a_gang_sharing_a_claim_is_all_or_nothing(world: World) -> None:
    controller, _ = setup(world)
    controller.run_cycle()
    world.service.apply_text(CLAIM.format(name="one", count=1))
    world.submit("crowd", SHARED.replace("cpu: 1", "cpu: 100"))  # 3 x 100 on a 224-core node
    controller.run_cycle()
    status = world.job("crowd").status
    assert status is not None and status.reason == "Unschedulable"
    assert "2 of 3" in status.message and "fit" in status.message
    assert claim(world, "one").status is None  # nothing allocated, nobody reserved
    world.submit("free", TASK.format(claim="one").replace("worker", "other"))
    controller.run_cycle()
    assert consumers(world, "one") == ["free/other-0"]


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ("[{name: gpus}]", "exactly one of resourceClaimName or resourceClaimTemplateName"),
        (
            "[{name: gpus, resourceClaimName: a, resourceClaimTemplateName: b}]",
            "exactly one of resourceClaimName or resourceClaimTemplateName",
        ),
        ("[{name: Not_A_Name, resourceClaimName: a}]", "'Not_A_Name' is not a valid name"),
    ],
)
def test_a_bad_claim_reference_is_refused(world: World, claims: str, reason: str) -> None:
    world.setup()
    task = f"    - name: worker\n      command: [x]\n      resources: {{claims: {claims}}}\n"
    with pytest.raises(InvalidObject) as caught:
        world.submit("bad", task)
    message = str(caught.value)
    assert message.startswith("Job bad: spec.tasks[0].resources.claims[0]")
    assert reason in message


def test_gpus_given_by_claims_count_against_the_quota(world: World) -> None:
    """A GPU quota cannot be bypassed by asking for GPUs through a claim."""
    controller, clock = setup(world)
    world.service.apply_text(
        "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\nspec: {quota: {gpu: 4}}\n"
    )
    controller.run_cycle()
    for name in ("a", "b"):
        world.service.apply_text(CLAIM.format(name=name, count=3))
        world.submit(f"job-{name}", TASK.format(claim=name))
    controller.run_cycle()
    assert world.job("job-a").status.reason == "Scheduled"  # type: ignore[union-attr]
    status = world.job("job-b").status
    assert status is not None and status.reason == "QuotaExceeded"
    # The session's words: the claims' GPUs are counted once its devices are chosen.
    assert status.message == "tenant acme is at its quota of 4 GPUs (gpu: holds 3, needs 3 more)"
    assert claim(world, "b").status is None  # not allocated: its devices were given back
    controller.run_cycle()  # the running claim's GPUs are counted after a cycle too
    assert world.job("job-b").status.reason == "QuotaExceeded"  # type: ignore[union-attr]
    clock.advance(60)
    controller.run_cycle()
    controller.run_cycle()
    assert world.job("job-b").status.reason == "Scheduled"  # type: ignore[union-attr]
