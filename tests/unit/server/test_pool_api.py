"""NodePool through the API and the CLI: only platform admins write pools; anyone signed in
reads them; bad pools are refused naming the field; `aipaas nodepool scale` sets the size."""

from __future__ import annotations

from typing import Any, cast

import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from aipaas.cli.app import app
from aipaas.client import Client
from tests.unit.server.api_world import Api

POOL = """
apiVersion: aipaas/v1
kind: NodePool
metadata: {name: h100}
spec:
  backend: sim
  node: {cpu: 64, memory: 512Gi, gpus: {count: 8, model: H100}}
  maxSize: 4
  pricePerHour: 25
  lending: {enabled: true, lender: acme, spotPricePerGpuHour: 1.5}
"""


def apply(api: Api, user: str, text: str = POOL) -> Any:  # the test client's response type
    return api.client.post("/api/v1/apply", content=text, headers=api.as_(user))


def test_a_platform_admin_creates_reads_and_deletes_a_pool(api: Api) -> None:
    assert apply(api, "admin").status_code == 200
    seen = api.client.get("/api/v1/nodepools/h100", headers=api.as_("alice"))
    assert seen.status_code == 200
    assert seen.json()["spec"]["lending"]["spotPricePerGpuHour"] == 1.5
    listed = api.client.get("/api/v1/nodepools", headers=api.as_("bob"))
    assert [p["metadata"]["name"] for p in listed.json()["items"]] == ["h100"]
    gone = api.client.delete("/api/v1/nodepools/h100", headers=api.as_("admin"))
    assert gone.status_code == 200
    assert api.client.get("/api/v1/nodepools/h100", headers=api.as_("admin")).status_code == 404


@pytest.mark.parametrize("user", ["tad", "alice", "vera", "bob"])
def test_no_one_but_a_platform_admin_writes_pools(api: Api, user: str) -> None:
    assert apply(api, user).status_code == 403
    assert apply(api, "admin").status_code == 200
    pool = api.client.get("/api/v1/nodepools/h100", headers=api.as_(user)).json()
    pool["spec"]["size"] = 4
    replaced = api.client.put(
        "/api/v1/nodepools/h100", content=yaml.safe_dump(pool), headers=api.as_(user)
    )
    assert replaced.status_code == 403
    assert api.client.delete("/api/v1/nodepools/h100", headers=api.as_(user)).status_code == 403
    tenanted = POOL.replace("{name: h100}", "{name: mine, tenant: acme}")
    assert apply(api, user, tenanted).status_code in (403, 422)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ("maxSize: 4", "maxSize: -1"),
        ("maxSize: 4", "maxSize: 4\n  minSize: 5"),
        ("maxSize: 4", "maxSize: 4\n  size: 9"),
        ("model: H100}", "model: ''}"),
        ("maxSize: 4", "maxSize: 4\n  idleThreshold: soon"),
        ("backend: sim", "backend: 'Sim!'"),
    ],
)
def test_bad_pools_are_refused_naming_the_field(api: Api, change: str, field: str) -> None:
    answer = apply(api, "admin", POOL.replace(change, field))
    assert answer.status_code == 422, answer.text
    expected = {
        "maxSize: -1": "spec.maxSize",
        "maxSize: 4\n  minSize: 5": "spec.minSize",
        "maxSize: 4\n  size: 9": "spec.size",
        "model: ''}": "spec.node.gpus.model",
        "maxSize: 4\n  idleThreshold: soon": "spec.idleThreshold",
        "backend: 'Sim!'": "spec.backend",
    }[field]
    assert expected in answer.text


def test_cli_scales_a_pool_and_hands_it_back_to_the_autoscaler(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert apply(api, "admin").status_code == 200

    def from_env(cls: type[Client], environ: object = None) -> Client:
        client = Client("http://testserver")
        # the SDK over the in-process app (the test client is an httpx client of its own)
        client.http = cast(
            Any,
            TestClient(api.client.app, base_url="http://testserver/api/v1", headers=api.as_(user)),
        )
        return client

    user = "admin"
    monkeypatch.setattr(Client, "from_env", classmethod(from_env))
    runner = CliRunner()
    done = runner.invoke(app, ["nodepool", "scale", "h100", "--size", "3"])
    assert done.exit_code == 0, done.output
    stored = api.client.get("/api/v1/nodepools/h100", headers=api.as_("admin")).json()
    assert stored["spec"]["size"] == 3
    refused = runner.invoke(app, ["nodepool", "scale", "h100", "--size", "9"])
    assert refused.exit_code == 1 and "spec.size" in refused.output
    table = runner.invoke(app, ["get", "nodepools"])
    assert table.exit_code == 0 and "h100" in table.output and "8xH100" in table.output
    assert runner.invoke(app, ["nodepool", "scale", "h100", "--auto"]).exit_code == 0
    stored = api.client.get("/api/v1/nodepools/h100", headers=api.as_("admin")).json()
    assert "size" not in stored["spec"]
    user = "tad"
    forbidden = runner.invoke(app, ["nodepool", "scale", "h100", "--size", "2"])
    assert forbidden.exit_code == 1 and "platform admin" in forbidden.output
