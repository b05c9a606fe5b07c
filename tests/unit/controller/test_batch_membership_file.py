"""Membership files of elastic jobs, as backends write them (backends/base.py
``MembershipFiles``): where the tenant's tasks can read them, replaced whole, found through the
wrappers the server puts around a backend (fencing, composite)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from aipaas.backends.base import membership_files
from aipaas.backends.composite import CompositeBackend
from aipaas.backends.fencing import Fenced, TokenFile
from aipaas.backends.local.backend import LocalBackend
from aipaas.backends.local.isolation import TaskIsolation
from aipaas.backends.sim import SimBackend, load_cluster

PAYLOAD = {"size": 1, "members": [{"rank": 0, "name": "w-0", "node": "here"}]}


def local(tmp_path: Path) -> LocalBackend:
    isolation = TaskIsolation(tmp_path / "tasks", separate=False)
    return LocalBackend(
        tmp_path / "run",
        node_name="here",
        cpu_milli=4000,
        memory_mib=4096,
        gpus=[],
        isolation=isolation,
    )


def test_local_writes_in_the_tenant_directory(tmp_path: Path) -> None:
    backend = local(tmp_path)
    path = backend.membership_file("here", "acme", "train-1234abcd")
    assert path == str(tmp_path / "tasks" / "acme" / "train-1234abcd.membership.json")
    assert backend.membership_file("elsewhere", "acme", "train-1234abcd") is None
    backend.update_membership("acme", "train-1234abcd", PAYLOAD)
    assert json.loads(Path(path).read_text()) == PAYLOAD
    backend.update_membership("acme", "train-1234abcd", {"size": 0, "members": []})
    assert json.loads(Path(path).read_text())["size"] == 0
    # replaced atomically: no temporary file is left beside it
    assert os.listdir(Path(path).parent) == ["train-1234abcd.membership.json"]


def test_wrappers_find_the_member_that_has_the_node(tmp_path: Path) -> None:
    inner = local(tmp_path)
    fenced = Fenced(inner, TokenFile(tmp_path / "token"))
    sim = SimBackend(tmp_path / "sim", load_cluster())
    composite = CompositeBackend([fenced, sim], [sim])
    composite.inventory()
    found = membership_files(composite)
    assert found is not None
    sim_node = sim.nodes[0].name
    assert found.membership_file("here", "acme", "j") == inner.membership_file("here", "acme", "j")
    assert found.membership_file(sim_node, "acme", "j") == sim.membership_file(
        sim_node, "acme", "j"
    )
    found.update_membership("acme", "j", PAYLOAD)
    for path in (
        inner.membership_file("here", "acme", "j"),
        sim.membership_file(sim_node, "acme", "j"),
    ):
        assert path is not None and json.loads(Path(path).read_text()) == PAYLOAD
