"""DRA end to end on a real server with the sim backend's 8 x H100 nodes: device classes and a
claim applied with the CLI, a job that uses the claim, `get devices` and `describe claim`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server_process import ServerProcess

EXAMPLES = Path(__file__).parents[2] / "examples"
SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
spec: {quota: {gpu: 64, cpu: 64, memory: 512Gi}}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: alice, tenant: acme}
spec: {role: member}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
"""
CLAIM = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: {name}}}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {{deviceClassName: gpu.nvidia.com, count: {count}}}
    constraints:
    - matchAttribute: gpu.nvidia.com/nvlinkDomain
"""
# 45 s of simulated work: the checks made while a job holds its devices (several CLI calls)
# fit in that on a loaded machine.
JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, annotations: {{sim.aipaas.dev/duration: "45"}}}}
spec:
  queue: research
  tasks:
    - name: worker
      command: [train]
      resources:
        cpu: 1
        claims: [{{name: gpus, resourceClaimName: {claim}}}]
"""


@pytest.fixture
def sim_server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path / "data", backend="sim").start()
    yield process
    process.stop()


def _wait(check: Any, what: str, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"never: {what}")


def test_a_job_with_a_claim_holds_its_devices(sim_server: ServerProcess, tmp_path: Path) -> None:
    server = sim_server
    setup = tmp_path / "setup.yaml"
    setup.write_text(SETUP)
    server.cli("apply", "-f", str(setup))
    classes = server.cli("apply", "-f", str(EXAMPLES / "dra" / "nvidia-classes.yaml")).stdout
    assert "deviceclass/gpu.nvidia.com created" in classes
    alice = server.cli("tokens", "create", "alice").stdout.strip()

    # The sim backend's nodes publish their GPUs: 2 nodes x 8 H100, all free.
    devices = _wait(lambda: server.cli_json("get", "devices"), "devices published")
    assert len(devices) == 16
    first = devices[0]
    assert first["node"] == "sim-dgx-0" and first["device"] == "gpu-0"
    assert first["attributes"]["gpu.nvidia.com/model"] == "H100"
    assert first["attributes"]["gpu.nvidia.com/nvlinkDomain"] == "sim-dgx-0-nvl0"
    assert first["attributes"]["gpu.nvidia.com/numaNode"] == 0
    assert {d["state"] for d in devices} == {"Free"}

    # A member may not publish devices.
    slice_file = tmp_path / "slice.yaml"
    slice_file.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: mine}\n"
        "spec: {driver: x.example.com, nodeName: n, pool: {name: n, resourceSliceCount: 1}}\n"
    )
    refused = server.cli("apply", "-f", str(slice_file), token=alice, check=False)
    assert refused.returncode != 0 and "may not write ResourceSlice" in refused.stderr

    claim = tmp_path / "claim.yaml"
    claim.write_text(CLAIM.format(name="two-gpus", count=2))
    applied = server.cli("apply", "-f", str(claim), token=alice).stdout
    assert applied == "resourceclaim/two-gpus created\n"
    job = tmp_path / "job.yaml"
    job.write_text(JOB.format(name="train", claim="two-gpus"))
    server.cli("apply", "-f", str(job), token=alice)

    def held() -> list[dict[str, Any]]:
        rows = server.cli_json("get", "devices")
        return [r for r in rows if r["holders"]]

    taken = _wait(held, "the claim's devices held")
    assert [(r["node"], r["device"]) for r in taken] == [
        ("sim-dgx-0", "gpu-0"),
        ("sim-dgx-0", "gpu-1"),
    ]
    assert all(r["holders"] == ["acme/two-gpus"] and r["state"] == "Allocated" for r in taken)
    table = server.cli("get", "devices").stdout
    assert "acme/two-gpus" in table and "sim-dgx-0-nvl0" in table and "H100" in table

    described = server.cli("describe", "claim", "two-gpus", token=alice).stdout
    assert "allocation:\n  gpus: gpu-0 (driver gpu.nvidia.com, pool sim-dgx-0)" in described
    assert "gpus: gpu-1 (driver gpu.nvidia.com, pool sim-dgx-0)" in described
    assert "Allocated" in described

    # A claim no node can satisfy waits, and says why.
    claim.write_text(CLAIM.format(name="nine-gpus", count=9))
    server.cli("apply", "-f", str(claim), token=alice)
    job.write_text(JOB.format(name="greedy", claim="nine-gpus"))
    server.cli("apply", "-f", str(job), token=alice)
    waiting = _wait(
        lambda: (
            "waiting: job greedy:"
            in (out := server.cli("describe", "claim", "nine-gpus", token=alice).stdout)
            and out
        ),
        "the unsatisfiable claim's reason",
    )
    assert "0/2 nodes are available" in waiting
    status = server.job("greedy").get("status") or {}
    assert status.get("reason") == "Unschedulable"

    # When the task ends, its devices are free again.
    server.wait_phase("train", "Succeeded", timeout=120)
    _wait(lambda: not held(), "the devices freed")
    described = server.cli("describe", "claim", "two-gpus", token=alice).stdout
    assert "Deallocated" in described


def test_invalid_device_objects_name_object_field_and_reason(
    sim_server: ServerProcess, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        CLAIM.format(name="bad-claim", count=2).replace(
            "matchAttribute: gpu.nvidia.com/nvlinkDomain", "matchAttribute: 'not valid!'"
        )
    )
    setup = tmp_path / "setup.yaml"
    setup.write_text(SETUP)
    sim_server.cli("apply", "-f", str(setup))
    result = sim_server.cli("apply", "-f", str(bad), check=False)
    assert result.returncode != 0
    assert "bad-claim" in result.stderr
    assert "spec.devices.constraints[0].matchAttribute" in result.stderr


def test_a_template_gives_each_replica_its_devices(
    sim_server: ServerProcess, tmp_path: Path
) -> None:
    server = sim_server
    setup = tmp_path / "setup.yaml"
    setup.write_text(SETUP)
    server.cli("apply", "-f", str(setup))
    server.cli("apply", "-f", str(EXAMPLES / "dra" / "nvidia-classes.yaml"))
    manifest = tmp_path / "wide.yaml"
    manifest.write_text(
        """apiVersion: resource.k8s.io/v1
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
---
apiVersion: aipaas/v1
kind: Job
metadata: {name: wide, tenant: acme, annotations: {sim.aipaas.dev/duration: "300"}}
spec:
  queue: research
  tasks:
    - name: worker
      replicas: 2
      command: [train]
      resources:
        cpu: 1
        claims: [{name: gpus, resourceClaimTemplateName: four-linked}]
"""
    )
    assert server.cli("apply", "-f", str(manifest)).stdout.splitlines() == [
        "resourceclaimtemplate/four-linked created",
        "job/wide created",
    ]

    def holders() -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in server.cli_json("get", "devices"):
            for holder in row["holders"]:
                counts[holder] = counts.get(holder, 0) + 1
        return counts

    held = _wait(lambda: len(holders()) == 2 and holders(), "both replicas' claims held")
    assert held == {"acme/wide-worker-0-gpus": 4, "acme/wide-worker-1-gpus": 4}
    described = server.cli("describe", "claim", "wide-worker-1-gpus", "-t", "acme").stdout
    assert "allocation:" in described and "pool sim-dgx-0" in described


def test_shared_claims_and_the_short_form_share_one_ledger(
    sim_server: ServerProcess, tmp_path: Path
) -> None:
    """Through a real server: two replicas share one named claim (same devices, same node,
    both in reservedFor); a ``gpu: 4`` job gets a compiled claim from the same device ledger;
    nothing is held twice; a claim named wrongly waits with a reason naming it."""
    server = sim_server
    setup = tmp_path / "setup.yaml"
    setup.write_text(SETUP)
    server.cli("apply", "-f", str(setup))
    server.cli("apply", "-f", str(EXAMPLES / "dra" / "nvidia-classes.yaml"))
    _wait(lambda: server.cli_json("get", "devices"), "devices published")
    manifest = tmp_path / "work.yaml"
    manifest.write_text(
        CLAIM.format(name="pair", count=2).replace("{name: pair}", "{name: pair, namespace: acme}")
        + "---\n"
        + JOB.format(name="duo", claim="pair")
        .replace("metadata: {name: duo,", "metadata: {name: duo, tenant: acme,")
        .replace("- name: worker\n", "- name: worker\n      replicas: 2\n")
        + "---\n"
        + """apiVersion: aipaas/v1
kind: Job
metadata: {name: short, tenant: acme, annotations: {sim.aipaas.dev/duration: "45"}}
spec:
  queue: research
  tasks:
    - {name: worker, command: [train], resources: {cpu: 1, gpu: 4}}
---
"""
        + JOB.format(name="typo", claim="pari").replace(
            "metadata: {name: typo,", "metadata: {name: typo, tenant: acme,"
        )
    )
    server.cli("apply", "-f", str(manifest))

    def holders() -> dict[str, list[tuple[str, str]]]:
        held: dict[str, list[tuple[str, str]]] = {}
        for row in server.cli_json("get", "devices"):
            for holder in row["holders"]:
                held.setdefault(holder, []).append((row["node"], row["device"]))
        return held

    held = _wait(lambda: len(holders()) == 2 and holders(), "both claims held")
    assert sorted(held) == ["acme/pair", "acme/short-worker-0-gpu"]
    assert len(held["acme/pair"]) == 2 and len(held["acme/short-worker-0-gpu"]) == 4
    every = held["acme/pair"] + held["acme/short-worker-0-gpu"]
    assert len(set(every)) == 6
    duo = _wait(
        lambda: (
            len(tasks := (server.job("duo").get("status") or {}).get("tasks", [])) == 2 and tasks
        ),
        "both replicas placed",
    )
    node = held["acme/pair"][0][0]
    assert [t["node"] for t in duo] == [node, node]
    assert duo[0]["gpus"] == duo[1]["gpus"] == [int(d.split("-")[1]) for _, d in held["acme/pair"]]
    claim = server.cli_json("get", "resourceclaims", "pair", "-t", "acme")
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["duo/worker-0", "duo/worker-1"]
    typo = _wait(
        lambda: (server.job("typo").get("status") or {}).get("message"), "the typo's reason"
    )
    assert typo == "task worker: claim pari does not exist in tenant acme"
    server.wait_phase("duo", "Succeeded", timeout=120)
    _wait(lambda: "acme/pair" not in holders(), "the shared claim freed with its last task")
