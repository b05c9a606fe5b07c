"""Node pools on Slurm's power saving, without Slurm: which scontrol commands aipaas runs and
how it reads the nodes' power states (22.05's and later JSON shapes). A real cluster with
ResumeProgram/SuspendProgram is not started here (scripts/slurm_cluster.sh configures none)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from aipaas.autoscale.pool_provider import NodeState, NodeTemplate, pool_provider
from aipaas.backends.slurm import SlurmBackend
from aipaas.backends.slurm.commands import SlurmCommands


def node(
    name: str, state: Any = "idle", flags: Sequence[str] = (), features: str = "h100"
) -> dict[str, Any]:
    return {
        "name": name,
        "cpus": 64,
        "real_memory": 512000,
        "gres": "gpu:h100:8",
        "state": state,
        "state_flags": list(flags),
        "partitions": ["gpu"],
        "active_features": features,
    }


class PowerSlurm(SlurmCommands):
    """slurmctld's answers; ``scontrol update ... State=POWER_UP|POWER_DOWN`` change them."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        super().__init__(None)
        self.node_list = nodes
        self.commands: list[list[str]] = []

    def nodes(self) -> list[dict[str, Any]]:
        return self.node_list

    def run(self, args: Sequence[str]) -> str:
        self.commands.append(list(args))
        assert args[:2] == ["scontrol", "update"], args
        names = args[2].removeprefix("NodeName=").split(",")
        state = args[3].removeprefix("State=")
        for item in self.node_list:
            if item["name"] in names:
                item["state_flags"] = ["POWERING_UP"] if state == "POWER_UP" else ["POWERED_DOWN"]
        return ""

    def boot(self, name: str) -> None:
        """ResumeProgram did its work: slurmd registered."""
        for item in self.node_list:
            if item["name"] == name:
                item["state_flags"] = []


TEMPLATE = NodeTemplate(
    pool="h100", cpu_milli=64000, memory_mib=512000, gpu_count=8, gpu_model="H100"
)


@pytest.fixture
def slurm() -> PowerSlurm:
    return PowerSlurm(
        [
            node("g1", flags=["POWERED_DOWN"]),
            node("g2", flags=["POWERED_DOWN"]),
            node("g3", ["IDLE", "POWERED_DOWN"]),  # the later versions' list form
            node("c1", features="cpu"),  # not in the pool
        ]
    )


def backend(slurm: PowerSlurm, tmp_path: Path) -> SlurmBackend:
    return SlurmBackend(tmp_path, commands=slurm)


def test_the_slurm_backend_is_a_pool_provider(slurm: PowerSlurm, tmp_path: Path) -> None:
    found = pool_provider(backend(slurm, tmp_path), "slurm")
    assert found is not None
    assert pool_provider(backend(slurm, tmp_path), "sim") is None


def test_growth_powers_up_nodes_and_they_provision_until_slurmd_registers(
    slurm: PowerSlurm, tmp_path: Path
) -> None:
    pool = backend(slurm, tmp_path)
    assert pool.list_nodes("h100") == []  # all off
    assert pool.create_nodes(TEMPLATE, 2) == ["g1", "g2"]
    assert slurm.commands == [["scontrol", "update", "NodeName=g1,g2", "State=POWER_UP"]]
    assert [(n.name, n.state) for n in pool.list_nodes("h100")] == [
        ("g1", NodeState.PROVISIONING),
        ("g2", NodeState.PROVISIONING),
    ]
    # Slurm takes work for a node powering up (the job starts once it has booted), and so
    # does the inventory; powered-down nodes are not in it.
    assert {n.name for n in pool.inventory().nodes} == {"c1", "g1", "g2"}
    slurm.boot("g1")
    states = {n.name: n.state for n in pool.list_nodes("h100")}
    assert states == {"g1": NodeState.READY, "g2": NodeState.PROVISIONING}
    assert pool.create_nodes(TEMPLATE, 5) == ["g3"]  # only one more is off


def test_a_drained_node_takes_no_work_and_is_powered_down_only_when_empty(
    slurm: PowerSlurm, tmp_path: Path
) -> None:
    pool = backend(slurm, tmp_path)
    pool.create_nodes(TEMPLATE, 2)
    slurm.boot("g1")
    slurm.boot("g2")
    slurm.node_list[0]["state"] = "allocated"  # g1 runs a job
    pool.drain_nodes("h100", ["g1", "g2"])
    inventory = pool.inventory()
    assert {"g1", "g2"} <= {n.name for n in inventory.nodes}  # still there: tasks go on
    assert inventory.unknown == {"g1", "g2"}  # but nothing new lands
    assert {n.name: n.state for n in pool.list_nodes("h100")} == {
        "g1": NodeState.DRAINING,
        "g2": NodeState.DRAINING,
    }
    slurm.commands.clear()
    assert pool.delete_nodes("h100", ["g1", "g2"]) == ["g2"]  # g1 is busy: kept
    assert slurm.commands == [["scontrol", "update", "NodeName=g2", "State=POWER_DOWN"]]
    slurm.node_list[0]["state"] = "idle"
    assert pool.delete_nodes("h100", ["g1"]) == ["g1"]
    assert pool.list_nodes("h100") == []
    assert pool.inventory().unknown == frozenset()


def test_undrain_and_no_power_down_of_a_node_never_drained(
    slurm: PowerSlurm, tmp_path: Path
) -> None:
    pool = backend(slurm, tmp_path)
    pool.create_nodes(TEMPLATE, 1)
    slurm.boot("g1")
    assert pool.delete_nodes("h100", ["g1"]) == []  # a removal always follows a drain
    pool.drain_nodes("h100", ["g1"])
    pool.undrain_nodes("h100", ["g1"])
    assert [n.state for n in pool.list_nodes("h100")] == [NodeState.READY]
    # The drained set outlives the process (a restarted server keeps its cordons).
    pool.drain_nodes("h100", ["g1"])
    assert backend(slurm, tmp_path).inventory().unknown == {"g1"}


def test_a_nodes_since_holds_while_its_state_does(slurm: PowerSlurm, tmp_path: Path) -> None:
    pool = backend(slurm, tmp_path)
    pool.create_nodes(TEMPLATE, 1)
    slurm.boot("g1")
    first = pool.list_nodes("h100")
    assert pool.list_nodes("h100") == first  # no status write each cycle for nothing
